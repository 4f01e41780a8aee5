#!/usr/bin/env python3
"""Decode-only probe: why does NVDEC give what it gives?

Runs K parallel ffmpeg decodes of a looped clip for a few seconds and prints
their aggregate steady-state frames per second, with NVML's decoder
utilisation (nvidia-smi) and the host CPU use sampled meanwhile. Each --run
is MODE:CLIP:K1,K2,... and MODE is one of

  hwaccel     -hwaccel cuda -hwaccel_output_format cuda (FFmpeg's NVDEC
              hwaccel, its default threads; what vigil and bench --streams use)
  hwaccel-t1  the same with -threads 1
  cuvid       the h264_cuvid decoder (NVIDIA's parser, several frames in
              flight), output kept in GPU memory
  cpu         software, -threads 1

A process's frames count from its first progress report after --settle
seconds (start-up) to its last, as `vigil bench --streams` counts them; the
decoder utilisation is sampled after --settle too (max / mean), and the CPU
busy share is the whole machine's over the run.

  python3 scripts/nvdec-probe.py --ffmpeg bin/ffmpeg-static \\
      --run hwaccel:cam1080.mp4:1,7,14 --run cuvid:cam1080.mp4:7
"""
import argparse
import os
import signal
import subprocess
import shutil
import sys
import tempfile
import threading
import time

CHILDREN = []  # every ffmpeg started, killed on Ctrl-C

MODES = {
    "hwaccel": ["-hwaccel", "cuda", "-hwaccel_output_format", "cuda"],
    "hwaccel-t1": ["-threads", "1", "-hwaccel", "cuda", "-hwaccel_output_format", "cuda"],
    "cuvid": ["-hwaccel", "cuda", "-hwaccel_output_format", "cuda", "-c:v", "h264_cuvid"],
    "cpu": ["-threads", "1"],
}


def cpu_times():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v), idle


def sampler(stop, dec, device, start, settle, period=0.5):
    """Collects the device's NVML decoder utilisation (%) after the settle
    time until stop is set."""
    try:
        p = subprocess.Popen(["nvidia-smi", "-i", str(device), "--query-gpu=utilization.decoder",
                              "--format=csv,noheader,nounits", "-lms", str(int(period * 1000))],
                             stdout=subprocess.PIPE, text=True)
    except OSError:
        return
    def read():
        for line in p.stdout:
            if time.monotonic() - start < settle:
                continue
            try:
                dec.append(float(line.split(",")[0]))
            except ValueError:
                pass
    t = threading.Thread(target=read, daemon=True)
    t.start()
    stop.wait()
    p.terminate()
    p.wait()


def one(ffmpeg, mode, clip, device, seconds, settle, start, rates, errs):
    args = [ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "error", "-progress", "pipe:1", "-stats_period", "0.5",
            "-nostats"] + MODES[mode]
    if mode != "cpu":
        args += ["-hwaccel_device", str(device)]
    args += ["-stream_loop", "-1", "-i", clip, "-an"]
    if mode != "cpu":
        args += ["-autoscale", "0"]
    args += ["-f", "null", "-"]
    errf = tempfile.TemporaryFile(mode="w+")  # a file, so that ffmpeg never blocks on a full stderr pipe
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=errf, text=True)
    CHILDREN.append(p)
    killer = threading.Timer(seconds, lambda: p.send_signal(signal.SIGINT))
    killer.start()
    # SIGINT at the end; killed if it has not stopped 5 s later.
    reaper = threading.Timer(seconds + 5, p.kill)
    reaper.start()
    first = last = None
    for line in p.stdout:
        if line.startswith("frame="):
            t = time.monotonic() - start
            try:
                n = int(line[6:])
            except ValueError:
                continue
            if t >= settle:
                if first is None:
                    first = (t, n)
                last = (t, n)
    p.wait()
    killer.cancel()
    reaper.cancel()
    errf.seek(0)
    err = errf.read()
    errf.close()
    if first and last and last[0] > first[0]:
        rates.append((last[1] - first[1]) / (last[0] - first[0]))
    else:
        # The first line is usually the cause ("Cannot load libcuda.so.1");
        # the last only says which step failed.
        lines = [l.strip() for l in err.splitlines() if l.strip()]
        errs.append(lines[0] if lines else "no steady-state progress report")


def probe(ffmpeg, mode, clip, k, device, seconds, settle):
    """Runs one measurement and prints its row; returns False when a
    decode failed."""
    rates, errs, dec = [], [], []
    stop = threading.Event()
    start = time.monotonic()
    st = threading.Thread(target=sampler, args=(stop, dec, device, start, settle), daemon=True)
    st.start()
    c0 = cpu_times()
    ts = [threading.Thread(target=one, args=(ffmpeg, mode, clip, device, seconds, settle, start, rates, errs))
          for _ in range(k)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    c1 = cpu_times()
    stop.set()
    st.join()
    busy = 1 - (c1[1] - c0[1]) / max(1, c1[0] - c0[0])
    total = sum(rates)
    dec_s = f"{max(dec):.0f}/{sum(dec) / len(dec):.0f}" if dec else "n/a"
    e = f"  errors: {len(errs)} ({errs[0]})" if errs else ""
    per = total / len(rates) if rates else 0.0  # over the decodes that ran
    print(f"{mode:<11} {os.path.basename(clip):<22} {k:>3} {total:>9.1f} {per:>8.1f} {dec_s:>10} "
          f"{100 * busy:>7.0f}%{e}", flush=True)
    return not errs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ffmpeg", default="ffmpeg", help="ffmpeg CLI with NVDEC (h264_nvdec hwaccel, h264_cuvid)")
    ap.add_argument("--run", action="append", required=True, help="MODE:CLIP:K1,K2,... (repeatable)")
    ap.add_argument("--seconds", type=float, default=6, help="length of each measurement (s)")
    ap.add_argument("--settle", type=float, default=2, help="start-up not counted (s)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device")
    a = ap.parse_args()
    if a.settle < 0 or a.seconds <= a.settle + 1:
        sys.exit("--settle must be at least 0 and --seconds must exceed it by more than 1 s")
    if shutil.which(a.ffmpeg) is None:
        sys.exit(f"--ffmpeg {a.ffmpeg}: not found or not executable")
    runs = []
    for r in a.run:
        try:
            mode, clip, ks = r.split(":")
            ks = [int(k) for k in ks.split(",")]
        except ValueError:
            sys.exit(f"--run {r!r}: want MODE:CLIP:K1,K2,...")
        if mode not in MODES:
            sys.exit(f"--run {r!r}: mode {mode!r} is not one of {', '.join(MODES)}")
        if not os.path.isfile(clip):
            sys.exit(f"--run {r!r}: no file {clip}")
        if any(k < 1 for k in ks):
            sys.exit(f"--run {r!r}: K must be at least 1")
        runs.append((mode, clip, ks))
    print(f"{'mode':<11} {'clip':<22} {'K':>3} {'fps':>9} {'fps/dec':>8} {'NVDEC %':>10} {'CPU':>8}")
    print(f"{'':<11} {'':<22} {'':>3} {'':>9} {'':>8} {'max/mean':>10} {'busy':>8}")
    ok = True
    for mode, clip, ks in runs:
        for k in ks:
            ok = probe(a.ffmpeg, mode, clip, k, a.device, a.seconds, a.settle) and ok
    if not ok:
        sys.exit("nvdec-probe: some decodes failed (see the errors column)")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        for c in CHILDREN:
            if c.poll() is None:
                c.kill()
        sys.exit(130)
