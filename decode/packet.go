package decode

/*
#cgo pkg-config: libavcodec
#include <libavcodec/packet.h>

static uint8_t *vigil_packet_data(const AVPacket *p, int *size) {
	*size = p->size;
	return p->data;
}
*/
import "C"

import (
	"unsafe"

	"github.com/asticode/go-astiav"
)

// packetData returns pkt's payload where FFmpeg keeps it, without copying
// it into Go memory (Packet.Data copies): valid until pkt is unreferenced.
// go-astiav v0.16.0 has no accessor for the C packet; its Packet is a
// struct of that one pointer (packet.go), as TestPacketLayout checks.
func packetData(pkt *astiav.Packet) (unsafe.Pointer, int) {
	c := *(**C.AVPacket)(unsafe.Pointer(pkt))
	var n C.int
	p := C.vigil_packet_data(c, &n)
	return unsafe.Pointer(p), int(n)
}
