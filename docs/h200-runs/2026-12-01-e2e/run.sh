#!/usr/bin/env bash
# run.sh: on the H200, from the carried folder (this file's folder,
# .carry/e2e), writes raw outputs to $OUT/raw and packs them into
# $OUT/raw.tgz (the device tool returns 8 files at most).
#
# `vigil bench --streams` with YOLOX-Nano on cam1080.mp4, NVDEC only
# (decode.hwaccel cuda), decode.nvdec direct and ffmpeg one after the
# other at each stream count (one bench call per point, so that both modes
# have every count even when one fails), then hybrid decoding with direct
# NVDEC at one count; `nvidia-smi dmon -s u` beside each bench call.
#
# ONNX Runtime's libraries do not fit in the same call as the binary,
# the model and the clip (64 MiB a call): a first call carried them
# (.carry/e2e-lib) and unpacked them into /tmp/e2e/lib, where they stay
# while the machine is warm (README.md has its command).
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
D=/tmp/e2e
mkdir -p "$D/lib" "$D/models"
R=$OUT/raw
mkdir -p "$R"
T0=$SECONDS
finish() { tar czf "$OUT/raw.tgz" -C "$OUT" raw && rm -rf "$R"; }
[ -s "$D/lib/libonnxruntime_providers_cuda.so" ] || { echo "no ONNX Runtime in $D/lib: the machine went cold between the calls" | tee "$R/setup.txt"; finish; exit 1; }
xz -dc -T0 "$C/vigil.xz" >"$D/vigil" && chmod +x "$D/vigil"
xz -dc "$C/yolox_nano.onnx.xz" >"$D/models/yolox_nano.onnx"
cp "$C/cam1080.mp4" "$D/"
cp "$C"/*.yaml "$D/"
# The fixed-batch copies (scripts/batch_models.py needs onnx, which the
# machine's python3 has and this one's lacks).
python3 scripts/batch_models.py "$D/models/yolox_nano.onnx" 8 32 >"$R/setup.txt" 2>&1
if [ ! -s "$D/models/yolox_nano.b32.onnx" ] || [ ! -s "$D/models/yolox_nano.b8.onnx" ]; then
  echo "batch copies failed: running with infer.batch_sizes [1]" | tee -a "$R/setup.txt"
  sed -i 's/batch_sizes: \[1, 8, 32\]/batch_sizes: [1]/' "$D"/*.yaml
fi
ld=$D/lib
for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do
  [ -d "$d" ] && ld="$ld:$d"
done
export LD_LIBRARY_PATH=$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} VIGIL_CACHE_DIR=$D VIGIL_ORT_LIBRARY=$D/lib/libonnxruntime.so.1
{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=driver_version,clocks.max.sm,clocks.video --format=csv
  echo "cores: $(nproc)"
  "$D/vigil" version
  sha256sum "$D/vigil" "$D"/models/* "$D/cam1080.mp4" "$D"/lib/* "$D"/*.yaml
  cat "$D"/*.yaml
} >>"$R/machine.txt" 2>&1
cd "$D" || exit 1
# bench LABEL CONFIG N: one point; skipped when the call's time is short.
bench() {
  local label=$1 cfg=$2 n=$3
  if [ $((SECONDS - T0)) -gt 360 ]; then echo "## $label: skipped (time)" | tee -a "$R/summary.txt"; return; fi
  nvidia-smi dmon -s u -d 1 -o T >"$R/dmon-$label.txt" 2>&1 &
  local smi=$!
  {
    echo "## $label: $(date -u +%T)"
    echo "\$ vigil bench --streams --config $cfg --model yolox-nano --source cam1080.mp4 --ceiling 0 --warmup 8s --each 6s --budget-ms 100 --start $n --step 32 --max-streams $n"
  } >"$R/$label.txt"
  timeout 75 ./vigil bench --streams --config "$cfg" --model yolox-nano --source cam1080.mp4 --ceiling 0 \
    --warmup 8s --each 6s --budget-ms 100 --start "$n" --step 32 --max-streams "$n" >>"$R/$label.txt" 2>&1
  echo "exit status $?" >>"$R/$label.txt"
  kill $smi 2>/dev/null
  wait $smi 2>/dev/null
  { echo "## $label"; grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+|drops:|fails:|^result|panic|exit status|rror' "$R/$label.txt" | cut -c1-400; } | tee -a "$R/summary.txt"
}
for n in 64 96 128 160; do
  bench "direct-$n" cuda-direct.yaml "$n"
  bench "ffmpeg-$n" cuda-ffmpeg.yaml "$n"
done
bench hybrid-direct-128 hybrid-direct.yaml 128
echo "elapsed $((SECONDS - T0)) s" | tee -a "$R/summary.txt"
finish
