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

// packetData reads the AVPacket pointer out of go-astiav's Packet, which
// must therefore be a struct of that one pointer (v0.16.0); it gives the
// same bytes as Packet.Data, without the copy.
func TestPacketLayout(t *testing.T) {
	require.Equal(t, unsafe.Sizeof(uintptr(0)), unsafe.Sizeof(astiav.Packet{}),
		"go-astiav's Packet changed layout: revisit packetData in packet.go")
	pkt := astiav.AllocPacket()
	defer pkt.Free()
	require.NoError(t, pkt.FromData([]byte{1, 2, 3, 5, 8}))
	p, n := packetData(pkt)
	require.Equal(t, pkt.Data(), unsafe.Slice((*byte)(p), n))
}
