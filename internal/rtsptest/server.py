#!/usr/bin/env python3
"""Tiny RTSP test camera (gst-rtsp-server through python3-gi).

Serves a video file, or a live test picture, over RTSP; clients may use RTP
over TCP (interleaved) or UDP. The factory is shared, so several clients see
the same stream.

  server.py (--file F [--loop] | --preset live|live-hevc)
            [--port N] [--address A] [--path /stream]
            [--stall-after SECONDS] [--first-frame-delay SECONDS]
            [--packet-loss FRACTION] [--control-stdin]

It listens on 127.0.0.1 (--address 0.0.0.0 for every interface); --port 0
picks a free port (the default, 8554, is RTSP's usual alternative port).
Once listening it prints exactly one line, "READY rtsp://ADDRESS:PORT/path",
then serves until SIGTERM/SIGINT (or stdin EOF with --control-stdin),
exiting 0. It exits 1 when it cannot bind the port or read the file.

Presets, live cameras made by GStreamer (videotestsrc, a moving ball), for
trying vigil without a camera: 640x360 at 25 fps, the wall clock at the top
left (clockoverlay) and the stream's running time at the bottom right
(timeoverlay), a keyframe every second (25 frames), no B-frames.
  live       H.264 (openh264enc, Constrained Baseline)
  live-hevc  HEVC (x265enc, ultrafast, zero latency)
The overlays need gstreamer1.0-x (GStreamer's pango plugin); scripts/setup.sh
installs it with the rest.

Files (by extension):
  .h264, .264  H.264 Annex-B elementary stream (as `ffmpeg -f h264` writes
               it) without B-frames: PTS is taken from DTS.
  .ts, .m2ts   MPEG-TS with one H.264 or HEVC video stream (the PMT says
               which), B-frames allowed: PTS and DTS come from the file.
See EncodeH264, EncodeH264BFrames and EncodeHEVCCRA in the Go package.
The parser puts the parameter sets (SPS/PPS, and VPS for HEVC) in every
keyframe's access unit, so clients joining late can decode.

MPEG-TS timing: tsdemux starts its segment at the first PTS, and buffers
before it would be clipped (the payloader gives them the first buffer's RTP
timestamp, the sinks drop them). A stream cut at an open-GOP (CRA) picture
has RASL pictures, with earlier PTS, right after it, so every timestamp is
moved TS_MARGIN (1 s) later: the first packet goes out 1 s after PLAY.

--loop repeats the file forever. The bytes simply repeat (multifilesrc
loop=true): for an elementary stream h264parse keeps interpolating
timestamps across the seam (the file starts with SPS/PPS + IDR); for
MPEG-TS, tsdemux sees the clock jump back and keeps its output continuous.
The stream never ends and never jumps back in time.

--stall-after S: S seconds after a media is created (first DESCRIBE), a
blocking pad probe stops the stream before the payloader. No more RTP is
sent (RTCP may still be), but the RTSP session and TCP connection stay open.

--first-frame-delay S: the first RTP packet goes out S seconds after the
media starts playing (first PLAY), then the stream flows normally. RTSP
requests are answered at once. It is a pad offset on the parser's src pad:
the stream's running time (and the RTP timestamps) start S later, so the
sinks, which sync to the clock, hold the first packet until then; RTCP is
dropped until then too. Like --stall-after, it is timed per shared media.

--packet-loss P: each RTP packet is dropped with probability P right after
the payloader (a pad probe), from a random generator seeded with 1 per
media, so the same packets go missing on every run. Their sequence numbers
are used up, so a client sees them as lost in the network; RTCP is not
dropped. It works alike over UDP and TCP. See Options.PacketLoss in the Go
package for why the loss is made here rather than in a UDP proxy.

--control-stdin: read commands from stdin, one per line, "ID COMMAND ARGS",
and exit when stdin closes (the parent died). Each command is answered by
one line on stdout, "DONE ID details" or "FAIL ID reason":
  ID reset    at the next keyframe, the stream's timestamps jump back to
              where they started (the first frame's), while packets keep
              flowing in real time on the same RTSP session, with the same
              SSRC and consecutive sequence numbers: what a client of a
              camera sees when the camera restarts its encoder's timeline.
              Answered once the jump is made ("DONE ID back S seconds").
  ID loss P   set --packet-loss to P from now on (every media).
"""

import argparse
import os
import random
import signal
import sys
import threading

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

# TS_MARGIN is how much later MPEG-TS timestamps are moved (see above): more
# than the PTS lead of a CRA over its RASL pictures (3 frames: 0.6 s at 5 fps).
TS_MARGIN = 1 * Gst.SECOND

# MPEG-TS stream_type values of the PMT (ISO/IEC 13818-1, table 2-34).
TS_STREAM_TYPES = {0x1B: "h264", 0x24: "h265"}


def ts_codec(path):
    """Returns "h264" or "h265", the codec of the first video stream of the
    MPEG-TS file at path, read from its PMT; raises ValueError otherwise."""
    pmt_pid = None
    with open(path, "rb") as f:
        for _ in range(10000):
            pkt = f.read(188)
            if len(pkt) < 188 or pkt[0] != 0x47:
                break
            pid = (pkt[1] & 0x1F) << 8 | pkt[2]
            if not pkt[1] & 0x40 or pid not in (0, pmt_pid):  # no section start
                continue
            off = 4
            if pkt[3] & 0x20:  # adaptation field
                off += 1 + pkt[4]
            off += 1 + pkt[off]  # pointer field
            sec = pkt[off:]
            length = (sec[1] & 0x0F) << 8 | sec[2]
            body = sec[8:3 + length - 4]  # after the header, before the CRC
            if pid == 0 and sec[0] == 0x00:  # PAT: (program, PMT PID) pairs
                for i in range(0, len(body) - 3, 4):
                    if body[i] << 8 | body[i + 1]:  # program 0 is the NIT
                        pmt_pid = (body[i + 2] & 0x1F) << 8 | body[i + 3]
                        break
            elif pid == pmt_pid and sec[0] == 0x02:  # PMT
                i = 4 + ((body[2] & 0x0F) << 8 | body[3])  # skip program info
                while i + 5 <= len(body):
                    stype = body[i]
                    if stype in TS_STREAM_TYPES:
                        return TS_STREAM_TYPES[stype]
                    i += 5 + ((body[i + 3] & 0x0F) << 8 | body[i + 4])
                raise ValueError("no H.264 or HEVC stream in the PMT")
    raise ValueError("no PAT/PMT found (not an MPEG-TS file?)")


# The live presets' source: 640x360 at 25 fps, I420 for the encoders.
LIVE_SOURCE = ("videotestsrc is-live=true pattern=ball ! "
               "video/x-raw,width=640,height=360,framerate=25/1 ! "
               'clockoverlay time-format="%Y-%m-%d %H:%M:%S" halignment=left valignment=top ! '
               "timeoverlay halignment=right valignment=bottom ! "
               "videoconvert ! video/x-raw,format=I420")

# PRESETS maps each preset to its codec and encoder.
PRESETS = {
    "live": ("h264", "openh264enc gop-size=25"),
    "live-hevc": ("h265", "x265enc speed-preset=ultrafast tune=zerolatency key-int-max=25"),
}


def launch_line(args):
    """Returns the factory's gst-launch line for args.file or args.preset and
    whether its timestamps come from an MPEG-TS container."""
    # The parser's config-interval=-1 puts the parameter sets in every
    # keyframe's access unit, so late joiners can decode. (The payloader's
    # config-interval=-1 would insert them before every keyframe *slice*,
    # which splits multi-slice frames for ffmpeg.)
    tail = ("%sparse name=parse config-interval=-1 ! "
            "rtp%spay name=pay0 pt=96 config-interval=0 )")
    if args.preset:
        codec, encoder = PRESETS[args.preset]
        return ("( %s ! %s ! " + tail) % (LIVE_SOURCE, encoder, codec, codec), False
    loc = args.file.replace("\\", "\\\\").replace('"', '\\"')  # for gst_parse_launch
    if args.loop:
        src = 'multifilesrc location="%s" loop=true' % loc
    else:
        src = 'filesrc location="%s"' % loc
    ext = os.path.splitext(args.file)[1].lower()
    if ext in (".ts", ".m2ts"):
        codec, demux, ts = ts_codec(args.file), "tsdemux ! ", True
    elif ext in (".h264", ".264"):
        codec, demux, ts = "h264", "", False
    else:
        raise ValueError("unknown file type %r (want .h264, .264, .ts or .m2ts)" % ext)
    return ("( %s ! %s" + tail) % (src, demux, codec, codec), ts


_stdout_lock = threading.Lock()


def answer(line):
    """Prints one line on stdout, whole, from any thread."""
    with _stdout_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def not_seekable(_pad, info):
    """Answers SEEKING queries with "not seekable". A looped file cannot be
    sought (multifilesrc), but tsdemux says it can, and the server would then
    seek at PLAY and fail. A new query says "not seekable" until set, and a
    query probe cannot set it from Python (the query is not writable there)."""
    if info.get_query().type == Gst.QueryType.SEEKING:
        return Gst.PadProbeReturn.HANDLED
    return Gst.PadProbeReturn.OK


class Camera:
    """The misbehaviour of one media (one pipeline, shared by its clients).
    Its probes run on the pipeline's streaming thread, commands on the main
    loop: reset_ids is guarded by lock; loss is only assigned (atomic)."""

    def __init__(self, args, ts, loop, media):
        self.ts = ts
        self.loss = args.packet_loss
        self.rng = random.Random(1)
        self.first_pts = None  # of the first buffer, before any reset
        self.shift = 0  # ns the timestamps are moved back by resets
        self.lock = threading.Lock()
        self.reset_ids = []  # reset commands waiting for a keyframe
        self.in_loss_probe = False
        self.parse = media.get_element().get_by_name("parse")
        self.pay_src = media.get_element().get_by_name("pay0").get_static_pad("src")
        self.parse.get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER, self.on_buffer)
        self.pay_src.add_probe(Gst.PadProbeType.BUFFER | Gst.PadProbeType.BUFFER_LIST, self.on_rtp)
        if loop:
            self.parse.get_static_pad("src").add_probe(Gst.PadProbeType.QUERY_UPSTREAM, not_seekable)

    def on_buffer(self, _pad, info):
        """Fixes the parser's output timestamps and makes resets."""
        buf = info.get_buffer()
        if self.ts:
            for field in ("pts", "dts"):
                t = getattr(buf, field)
                if t != Gst.CLOCK_TIME_NONE:
                    setattr(buf, field, t + TS_MARGIN)
        elif buf.pts == Gst.CLOCK_TIME_NONE:
            # h264parse only interpolates DTS for an elementary stream;
            # without B-frames PTS == DTS, and the payloader and the sinks
            # need PTS.
            buf.pts = buf.dts
        if buf.pts == Gst.CLOCK_TIME_NONE:
            return Gst.PadProbeReturn.OK
        if self.first_pts is None:
            self.first_pts = buf.pts
        if not buf.has_flags(Gst.BufferFlags.DELTA_UNIT):
            with self.lock:
                ids, self.reset_ids = self.reset_ids, []
            if ids:
                self.reset(buf.pts - self.shift, ids)
        if self.shift:
            buf.pts -= self.shift
            if buf.dts != Gst.CLOCK_TIME_NONE:
                buf.dts -= self.shift
        return Gst.PadProbeReturn.OK

    def request_reset(self, cid):
        """Makes reset answer command cid at the next keyframe."""
        with self.lock:
            self.reset_ids.append(cid)

    def reset(self, pts, ids):
        """Moves the timestamps from the keyframe at pts (ns, after earlier
        resets) back to the first frame's. The payloader makes its RTP
        timestamps from the running time, so they jump back too; the same
        offset on its src pad keeps the running time downstream (rtpbin and
        the sinks, which pace the packets) going on unchanged."""
        back = pts - self.first_pts
        self.shift += back
        self.pay_src.set_offset(self.pay_src.get_offset() + back)
        for cid in ids:
            answer("DONE %s back %.3f seconds" % (cid, back / Gst.SECOND))

    def on_rtp(self, pad, info):
        """Drops RTP packets at random with probability self.loss."""
        if self.in_loss_probe or self.loss <= 0:
            return Gst.PadProbeReturn.OK
        if info.type & Gst.PadProbeType.BUFFER:
            if self.rng.random() < self.loss:
                return Gst.PadProbeReturn.DROP
            return Gst.PadProbeReturn.OK
        # A list (the fragments of one NAL unit) cannot be edited from
        # Python: push the packets that survive one by one instead.
        blist = info.get_buffer_list()
        keep = [blist.get(i) for i in range(blist.length()) if self.rng.random() >= self.loss]
        self.in_loss_probe = True
        try:
            for buf in keep:
                if pad.push(buf) != Gst.FlowReturn.OK:
                    break
        finally:
            self.in_loss_probe = False
        return Gst.PadProbeReturn.DROP


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--file", help=".h264 (no B-frames), .ts or .m2ts (H.264 or HEVC)")
    source.add_argument("--preset", choices=sorted(PRESETS), help="a live test picture")
    ap.add_argument("--port", type=int, default=8554, help="default 8554; 0 picks a free port")
    ap.add_argument("--address", default="127.0.0.1", help="address to listen on")
    ap.add_argument("--path", default="/stream", help="mount point")
    ap.add_argument("--loop", action="store_true", help="repeat the file forever")
    ap.add_argument("--stall-after", type=float, default=0,
                    help="stop sending RTP after this many seconds (0: never)")
    ap.add_argument("--first-frame-delay", type=float, default=0,
                    help="send the first RTP packet this many seconds late")
    ap.add_argument("--packet-loss", type=float, default=0,
                    help="drop this fraction of the RTP packets (0 to 1)")
    ap.add_argument("--control-stdin", action="store_true",
                    help="read commands from stdin; exit when it closes")
    args = ap.parse_args()
    if args.preset and args.loop:
        ap.error("--loop applies to --file only (a preset never ends)")
    if not args.path.startswith("/"):
        args.path = "/" + args.path

    Gst.init(None)
    try:
        launch, ts = launch_line(args)
    except (OSError, ValueError) as e:
        print("rtsptest: %s: %s" % (args.file or args.preset, e), file=sys.stderr, flush=True)
        return 1
    # Build the pipeline once now: a missing element (a plugin package not
    # installed) is then an error at start, not a 503 at every DESCRIBE.
    try:
        Gst.parse_launch(launch)
    except GLib.Error as e:
        print("rtsptest: cannot build the pipeline %s: %s (bash scripts/setup.sh installs "
              "the GStreamer packages it needs: gstreamer1.0-plugins-base, -good, -bad and "
              "gstreamer1.0-x)" % (launch, e.message), file=sys.stderr, flush=True)
        return 1

    # Stalling blocks the parser's streaming thread in a pad probe: no CPU is
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

    cameras = []  # of the media alive now

    def on_configure(_factory, media):
        cam = Camera(args, ts, args.loop, media)
        cameras.append(cam)
        media.connect("unprepared", lambda _media: cam in cameras and cameras.remove(cam))
        if args.first_frame_delay > 0:
            delay = int(args.first_frame_delay * Gst.SECOND)
            cam.parse.get_static_pad("src").set_offset(delay)
            media.connect("prepared", hush_rtcp, delay)
        if args.stall_after > 0:
            GLib.timeout_add(int(args.stall_after * 1000), stall, cam.parse)

    def command(line):
        words = line.split()
        if len(words) < 2:
            print("rtsptest: bad command %r" % line, file=sys.stderr, flush=True)
            return
        cid, name, params = words[0], words[1], words[2:]
        if name == "reset" and not params:
            if not cameras:
                answer("FAIL %s no media: no client is playing the stream" % cid)
            for cam in cameras:
                cam.request_reset(cid)
        elif name == "loss" and len(params) == 1:
            try:
                loss = float(params[0])
            except ValueError:
                loss = -1
            if not 0 <= loss <= 1:
                answer("FAIL %s loss %r is not a fraction between 0 and 1" % (cid, params[0]))
                return
            args.packet_loss = loss
            for cam in cameras:
                cam.loss = args.packet_loss
            answer("DONE %s loss %g" % (cid, args.packet_loss))
        else:
            answer("FAIL %s unknown command %r" % (cid, " ".join(words[1:])))

    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(launch)
    factory.set_shared(True)  # one pipeline for all clients
    factory.connect("media-configure", on_configure)

    server = GstRtspServer.RTSPServer()
    server.set_address(args.address)
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
    if args.control_stdin:
        pending = bytearray()

        def on_stdin(fd, _cond):
            data = os.read(fd, 4096)
            if not data:
                loop.quit()
                return GLib.SOURCE_REMOVE
            pending.extend(data)
            while b"\n" in pending:
                line, _, rest = bytes(pending).partition(b"\n")
                pending[:] = rest
                command(line.decode(errors="replace"))
            return GLib.SOURCE_CONTINUE

        GLib.unix_fd_add_full(GLib.PRIORITY_DEFAULT, sys.stdin.fileno(),
                              GLib.IOCondition.IN | GLib.IOCondition.HUP, on_stdin)

    answer("READY rtsp://%s:%d%s" % (args.address, server.get_bound_port(), args.path))
    loop.run()
    source.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
