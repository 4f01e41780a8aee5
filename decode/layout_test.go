package decode

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/asticode/go-astiav"
	"github.com/stretchr/testify/require"
)

// cPointer reads the C pointer of go-astiav's FormatContext and
// CodecContext, which must therefore be their first field (v0.16.0).
func TestContextLayouts(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeOf(astiav.FormatContext{}), reflect.TypeOf(astiav.CodecContext{})} {
		f := typ.Field(0)
		require.Equal(t, "c", f.Name, "go-astiav's %s changed layout: revisit cPointer in log.go", typ)
		require.Equal(t, reflect.Pointer, f.Type.Kind(), "%s.c", typ)
		require.Zero(t, f.Offset, "%s.c", typ)
		require.Equal(t, unsafe.Sizeof(uintptr(0)), f.Type.Size(), "%s.c", typ)
	}
	fc := astiav.AllocFormatContext()
	defer fc.Free()
	cc := astiav.AllocCodecContext(nil)
	defer cc.Free()
	// The pointer read is the one go-astiav logs with (Class.String ends
	// "@ <pointer>").
	require.True(t, strings.HasSuffix(fc.Class().String(), fmt.Sprintf("@ %p", cPointer(unsafe.Pointer(fc)))), fc.Class().String())
	require.True(t, strings.HasSuffix(cc.Class().String(), fmt.Sprintf("@ %p", cPointer(unsafe.Pointer(cc)))), cc.Class().String())
}
