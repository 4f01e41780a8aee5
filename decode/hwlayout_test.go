package decode

import (
	"testing"
	"unsafe"

	"github.com/asticode/go-astiav"
	"github.com/stretchr/testify/require"
)

// wrapDevice writes an AVBufferRef into go-astiav's HardwareDeviceContext,
// which must therefore be a struct of that one pointer (v0.16.0).
func TestHardwareDeviceContextLayout(t *testing.T) {
	require.Equal(t, unsafe.Sizeof(uintptr(0)), unsafe.Sizeof(astiav.HardwareDeviceContext{}),
		"go-astiav's HardwareDeviceContext changed layout: revisit wrapDevice in hw.go")
}
