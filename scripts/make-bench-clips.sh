#!/usr/bin/env bash
# Makes the H.264 clips that `vigil bench --streams` and scripts/nvdec-probe.py
# are run on, with Debian's ffmpeg (libx264), from a source video (default
# vtest.avi in vigil's asset cache: 768x576, 10 fps).
#
#   scripts/make-bench-clips.sh OUTDIR [SOURCE]
#
# Every clip is the first 150 source frames played at 30 fps (5 s, looped by
# the benchmarks; each frame distinct, none repeated to fill the rate), no
# audio, a keyframe every 60 frames (x264 would add one at a scene cut; vtest.avi
# has none: keyframes at frames 0, 60 and 120) and no B-frames, as IP cameras send:
#   cam1080.mp4       1920x1080 High profile, CABAC, 6 Mbit/s  (the bench clip)
#   cam1080-2m.mp4    the same at 2 Mbit/s                     (content cost)
#   cam1080-base.mp4  Baseline profile (CAVLC), 6 Mbit/s       (entropy coder)
#   cam720.mp4        1280x720 High, 3 Mbit/s                  (pixel rate)
set -euo pipefail
out=${1:?usage: make-bench-clips.sh OUTDIR [SOURCE]}
src=${2:-${VIGIL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vigil}/media/vtest.avi}
[ -f "$src" ] || { echo "make-bench-clips: no source video $src (run 'make setup', or give SOURCE)" >&2; exit 2; }
mkdir -p "$out"
enc() { # name size profile rate
  local f="$out/$1"
  [ -s "$f" ] && { echo "$f (kept)"; return; }
  ffmpeg -hide_banner -loglevel error -y -i "$src" -vf "scale=$2,setpts=N/(30*TB)" -r 30 -frames:v 150 -an \
    -c:v libx264 -preset medium -profile:v "$3" -b:v "$4" -maxrate "$4" -bufsize "$4" -bf 0 -g 60 \
    -pix_fmt yuv420p "$f.tmp.mp4"
  mv "$f.tmp.mp4" "$f"
  echo "$f"
}
enc cam1080.mp4 1920:1080 high 6M
enc cam1080-2m.mp4 1920:1080 high 2M
enc cam1080-base.mp4 1920:1080 baseline 6M
enc cam720.mp4 1280:720 high 3M
