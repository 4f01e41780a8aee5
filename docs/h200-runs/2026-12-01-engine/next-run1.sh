#!/usr/bin/env bash
# run1.sh (call 1): unpack ONNX Runtime and vigil into /tmp/eng (kept while
# the machine is warm, for call 2), make YOLOX-Nano's .b32/.b64/.b128 copies
# with scripts/batch_models.py, then `vigil bench --gpu` sweeps. Raw
# outputs in $OUT.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
D=/tmp/eng
R=$OUT
T0=$SECONDS
mkdir -p "$D/lib" "$D/models"
for f in "$C"/lib/*; do
  case $f in *.xz) xz -dc -T0 "$f" >"$D/lib/$(basename "$f" .xz)" ;; *) cp "$f" "$D/lib/" ;; esac
done
xz -dc -T0 "$C/vigil.xz" >"$D/vigil" && chmod +x "$D/vigil"
xz -dc "$C/yolox_nano.onnx.xz" >"$D/models/yolox_nano.onnx"
cp "$C/cam1080-45.mp4" "$D/"
python3 scripts/batch_models.py "$D/models/yolox_nano.onnx" 32 64 128 >"$R/setup.txt" 2>&1
ld=$D/lib
for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do
  [ -d "$d" ] && ld="$ld:$d"
done
echo "export LD_LIBRARY_PATH=$ld VIGIL_CACHE_DIR=$D VIGIL_ORT_LIBRARY=$D/lib/libonnxruntime.so.1" >"$D/env.sh"
. "$D/env.sh"
{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=driver_version,clocks.max.sm,clocks.sm,memory.total --format=csv
  echo "cores: $(nproc)"
  "$D/vigil" version
  sha256sum "$D/vigil" "$D"/models/* "$D/cam1080-45.mp4" "$D"/lib/*
  ls "$D"/lib
} >"$R/machine.txt" 2>&1
cd "$D" || exit 1
# step NAME LIMIT ARGS...: one bench call, skipped past 230 s of the call.
step() {
  local name=$1 lim=$2
  shift 2
  if [ $((SECONDS - T0)) -gt 240 ]; then echo "## $name: skipped (time)" | tee -a "$R/summary.txt"; return; fi
  echo "\$ vigil bench --gpu $*" >"$R/$name.txt"
  local t=$SECONDS
  timeout "$lim" ./vigil bench --gpu --model yolox-nano "$@" >>"$R/$name.txt" 2>&1
  echo "exit status $? after $((SECONDS - t)) s" >>"$R/$name.txt"
  { echo "## $name"; grep -E '^ *(32|64|128) |failed|refused|rror|panic|exit status|agreement|  [a-z0-9-]+\.(avi|mp4):' "$R/$name.txt" | cut -c1-300; } | tee -a "$R/summary.txt"
}
S=cam1080-45.mp4
# Each engine takes about 20 s to open (first run, 2026-12-01), so few points.
# 1. Model only, fp32: instances at batch 32 and 64.
step inst-fp32 130 --source $S --batches 32,64 --precisions fp32 --instances 1,2,4 --graph-only --model-only --duration 1s
# 2. Model only, batch 64: fp16 and tf32 with 2 and 4 instances.
step inst-fp16-tf32 100 --source $S --batches 64 --precisions fp16,tf32 --instances 2,4 --graph-only --model-only --duration 1s
# 3. Full engine path (1080p frames uploaded), batch 64, 2 instances.
step full 40 --source $S --batches 64 --precisions fp32 --instances 2 --graph-only --duration 1s
echo "elapsed $((SECONDS - T0)) s" | tee -a "$R/summary.txt"
