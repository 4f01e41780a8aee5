#!/usr/bin/env python3
"""Tiny RTSP test server (gst-rtsp-server through python3-gi).

Serves an H.264 Annex-B elementary stream (.h264, as written by
`ffmpeg -f h264`) over RTSP; clients may use RTP over TCP (interleaved) or
UDP. The factory is shared, so several clients see the same stream.

  server.py --file F.h264 [--port N] [--path /stream] [--loop]
            [--stall-after SECONDS] [--first-frame-delay SECONDS]
            [--exit-on-stdin-eof]

It listens on 127.0.0.1; --port 0 picks a free port. Once listening it
prints exactly one line, "READY rtsp://127.0.0.1:PORT/path", then serves
until SIGTERM/SIGINT (or stdin EOF with --exit-on-stdin-eof), exiting 0.
It exits 1 when it cannot bind the port.

The file must have no B-frames (PTS is taken from DTS); see EncodeH264 in
rtsptest.go.

--loop reads the file with multifilesrc loop=true: the bytes simply repeat,
h264parse keeps interpolating timestamps across the seam and the file starts
with SPS/PPS + IDR, so the stream never ends and never jumps back in time.

--stall-after S: S seconds after a media is created (first DESCRIBE), a
blocking pad probe stops the stream before the payloader. No more RTP is
sent (RTCP may still be), but the RTSP session and TCP connection stay open.

--first-frame-delay S: the first RTP packet goes out S seconds after the
media starts playing (first PLAY), then the stream flows normally. RTSP
requests are answered at once. It is a pad offset on h264parse's src pad:
the stream's running time (and the RTP timestamps) start S later, so the
sinks, which sync to the clock, hold the first packet until then; RTCP is
dropped until then too. Like --stall-after, it is timed per shared media.
"""

import argparse
import os
import signal
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", required=True, help="H.264 Annex-B elementary stream")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--path", default="/stream", help="mount point")
    ap.add_argument("--loop", action="store_true", help="repeat the file forever")
    ap.add_argument("--stall-after", type=float, default=0,
                    help="stop sending RTP after this many seconds (0: never)")
    ap.add_argument("--first-frame-delay", type=float, default=0,
                    help="send the first RTP packet this many seconds late")
    ap.add_argument("--exit-on-stdin-eof", action="store_true",
                    help="also exit when stdin closes (the parent died)")
    args = ap.parse_args()
    if not args.path.startswith("/"):
        args.path = "/" + args.path

    Gst.init(None)
    loc = args.file.replace("\\", "\\\\").replace('"', '\\"')  # for gst_parse_launch
    if args.loop:
        src = 'multifilesrc location="%s" loop=true' % loc
    else:
        src = 'filesrc location="%s"' % loc
    # h264parse config-interval=-1 puts SPS/PPS in every IDR access unit, so
    # late joiners can decode. (rtph264pay config-interval=-1 would insert them
    # before every IDR *slice*, which splits multi-slice frames for ffmpeg.)
    launch = ("( %s ! h264parse name=parse config-interval=-1 ! "
              "rtph264pay name=pay0 pt=96 config-interval=0 )" % src)

    # h264parse only interpolates DTS for an elementary stream; without B-frames
    # PTS == DTS, and the payloader and the sinks need PTS.
    def set_pts(_pad, info):
        buf = info.get_buffer()
        if buf.pts == Gst.CLOCK_TIME_NONE:
            buf.pts = buf.dts
        return Gst.PadProbeReturn.OK

    # Stalling blocks h264parse's streaming thread in a pad probe: no CPU is
    # spent, nothing reaches the payloader, and tearing the media down
    # (pads deactivated) releases the block.
    def stall(parse):
        print("rtsptest: stalling the stream now", file=sys.stderr, flush=True)
        parse.get_static_pad("src").add_probe(
            Gst.PadProbeType.BLOCK_DOWNSTREAM, lambda _pad, _info: Gst.PadProbeReturn.OK)
        return GLib.SOURCE_REMOVE

    # The pad offset of --first-frame-delay delays RTP at the sinks only: the
    # RTP session (upstream of them) already counts the packets, and would
    # send sender reports during the delay. Drop RTCP until the same
    # running time, so that the connection is really silent.
    def hush_rtcp(media, delay):
        def drop_early(pad, _info):
            el = pad.get_parent_element()
            clock = el.get_clock() if el else None
            if clock is None or clock.get_time() - el.get_base_time() < delay:
                return Gst.PadProbeReturn.DROP
            return Gst.PadProbeReturn.OK

        def on_pad(pad):
            if pad.get_name().startswith("send_rtcp_src"):
                pad.add_probe(Gst.PadProbeType.BUFFER | Gst.PadProbeType.BUFFER_LIST, drop_early)

        def on_element(el):
            factory = el.get_factory()
            if factory and factory.get_name() == "rtpbin":
                el.iterate_src_pads().foreach(on_pad)

        media.get_element().get_parent().iterate_recurse().foreach(on_element)

    def on_configure(_factory, media):
        parse = media.get_element().get_by_name("parse")
        parse.get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER, set_pts)
        if args.first_frame_delay > 0:
            delay = int(args.first_frame_delay * Gst.SECOND)
            parse.get_static_pad("src").set_offset(delay)
            media.connect("prepared", hush_rtcp, delay)
        if args.stall_after > 0:
            GLib.timeout_add(int(args.stall_after * 1000), stall, parse)

    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(launch)
    factory.set_shared(True)  # one pipeline for all clients
    factory.connect("media-configure", on_configure)

    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(args.port))
    server.get_mount_points().add_factory(args.path, factory)
    try:
        # create_source binds and raises on failure (attach() only logs).
        source = server.create_source(None)
    except GLib.Error as e:
        print("rtsptest: cannot listen on port %d: %s" % (args.port, e.message),
              file=sys.stderr, flush=True)
        return 1
    source.attach(None)

    loop = GLib.MainLoop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        GLib.unix_signal_add(GLib.PRIORITY_HIGH, sig, loop.quit)
    if args.exit_on_stdin_eof:
        def on_stdin(fd, _cond):
            if os.read(fd, 4096):
                return GLib.SOURCE_CONTINUE
            loop.quit()
            return GLib.SOURCE_REMOVE

        GLib.unix_fd_add_full(GLib.PRIORITY_DEFAULT, sys.stdin.fileno(),
                              GLib.IOCondition.IN | GLib.IOCondition.HUP, on_stdin)

    print("READY rtsp://127.0.0.1:%d%s" % (server.get_bound_port(), args.path),
          flush=True)
    loop.run()
    source.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
