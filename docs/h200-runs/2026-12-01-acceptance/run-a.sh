#!/usr/bin/env bash
# run-a.sh (acceptance call 1 of 2, 2026-12-01 late session): unpack ONNX
# Runtime 1.29 (CUDA 13 provider) and vigil into /tmp/eng, where they stay
# while the machine is warm for call 2; make YOLOX-Nano's .b8/.b32/.b64/.b128
# copies; then `vigil bench --gpu` model-only sweeps over instances,
# cuDNN algorithm search and precision, and the full engine path.
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
cp "$C/cam1080-16.mp4" "$D/"
python3 scripts/batch_models.py "$D/models/yolox_nano.onnx" 8 32 64 128 >"$R/setup.txt" 2>&1
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
  sha256sum "$D/vigil" "$D"/models/* "$D/cam1080-16.mp4" "$D"/lib/*
} >"$R/machine.txt" 2>&1
cd "$D" || exit 1
# step NAME LIMIT ARGS...: one bench call, skipped past 250 s of the call.
step() {
  local name=$1 lim=$2
  shift 2
  if [ $((SECONDS - T0)) -gt 250 ]; then echo "## $name: skipped (time)" | tee -a "$R/summary.txt"; return; fi
  echo "\$ vigil bench --gpu --model yolox-nano $*" >"$R/$name.txt"
  local t=$SECONDS
  timeout "$lim" ./vigil bench --gpu --model yolox-nano "$@" >>"$R/$name.txt" 2>&1
  echo "exit status $? after $((SECONDS - t)) s" >>"$R/$name.txt"
  { echo "## $name"; grep -E '^ *(32|64|128) |failed|refused|rror|panic|exit status|open' "$R/$name.txt" | cut -c1-300; } | tee -a "$R/summary.txt"
}
S=cam1080-16.mp4
# 1. fp32, batch 64, cuDNN heuristic search: 1, 2 and 4 instances.
step heur-inst 120 --source $S --batches 64 --precisions fp32 --instances 1,2,4 --conv-search heuristic --graph-only --model-only --duration 2s
# 2. fp16 and batch 128 with heuristic search, 2 and 4 instances.
step heur-fp16-b128 90 --source $S --batches 64,128 --precisions fp16 --instances 2,4 --conv-search heuristic --graph-only --model-only --duration 2s
# 3. fp32, exhaustive search (the default), 2 instances: open time and rate against 1.
step exh-inst2 60 --source $S --batches 64 --precisions fp32 --instances 2 --graph-only --model-only --duration 2s
# 4. The full engine path (1080p frames uploaded), 2 instances, heuristic.
step full 45 --source $S --batches 64 --precisions fp32 --instances 2 --conv-search heuristic --graph-only --duration 2s
echo "elapsed $((SECONDS - T0)) s" | tee -a "$R/summary.txt"
