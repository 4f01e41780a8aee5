#!/usr/bin/env bash
# run.sh: on the H200, from the carried folder (.carry/nvdec), after a first
# call unpacked ONNX Runtime into /tmp/e2e/lib and cam1080.mp4 into /tmp/e2e.
# Raw outputs go to $OUT/raw, packed into $OUT/raw.tgz.
#
# Parts, in this order, each skipped once the call has run too long:
#   e2e      vigil bench --streams, YOLOX-Nano, cam1080, 96 streams NVDEC
#            only: decode.nvdec direct, then ffmpeg (nvidia-smi dmon beside)
#   start    TestNVDECStart: 96 paced streams started at once, direct with
#            this branch's decode.test (after) and main's (before), then
#            ffmpeg (after)
#   rate     TestNVDECDecodeRate, unpaced: after direct 7,14,28 (and a CPU
#            profile at 14), before direct 14
#   tests    the direct-NVDEC GPU tests (bit-identical, resolution change,
#            reconnect) of after
#   e2e128   vigil bench --streams at 128, direct
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
D=/tmp/e2e
R=$OUT/raw
mkdir -p "$R" "$D/models"
T0=$SECONDS
finish() { tar czf "$OUT/raw.tgz" -C "$OUT" raw && rm -rf "$R"; }
[ -s "$D/lib/libonnxruntime_providers_cuda.so" ] || { echo "no ONNX Runtime in $D/lib: the machine went cold between the calls" | tee "$R/setup.txt"; finish; exit 1; }
xz -dc -T0 "$C/vigil.xz" >"$D/vigil" && chmod +x "$D/vigil"
for b in after before; do xz -dc -T0 "$C/$b.test.xz" >"$D/$b.test" && chmod +x "$D/$b.test"; done
xz -dc "$C/yolox_nano.onnx.xz" >"$D/models/yolox_nano.onnx"
cp "$C"/*.yaml "$D/"
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
export VIGIL_H264=$D/cam1080.mp4 VIGIL_NVDEC_CLIPS=$C/clips
{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=driver_version,clocks.max.sm,clocks.video --format=csv
  echo "cores: $(nproc)"
  "$D/vigil" version
  sha256sum "$D/vigil" "$D"/*.test "$D"/models/* "$D/cam1080.mp4" "$D"/lib/* "$D"/*.yaml "$C"/clips/*
  cat "$D"/*.yaml
} >>"$R/machine.txt" 2>&1
cd "$D" || exit 1
late() { [ $((SECONDS - T0)) -gt "$1" ] && { echo "## $2: skipped (time, $((SECONDS - T0)) s)" | tee -a "$R/summary.txt"; return 0; }; return 1; }
# bench LABEL CONFIG N
bench() {
  local label=$1 cfg=$2 n=$3
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
  { echo "## $label"; grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+|drops:|fails:|^result|panic|exit status' "$R/$label.txt" | cut -c1-400; } | tee -a "$R/summary.txt"
}
late 60 e2e || { bench direct-96 cuda-direct.yaml 96; bench ffmpeg-96 cuda-ffmpeg.yaml 96; }
if ! late 170 start; then
  echo "## start" >>"$R/summary.txt"
  for b in after before; do
    VIGIL_NVDEC_START="direct:96" VIGIL_NVDEC_START_SECONDS=8 VIGIL_NVDEC_RATE_LABEL=-$b timeout 40 ./$b.test -test.v -test.count 1 -test.run 'TestNVDECStart$' >>"$R/start.txt" 2>&1
  done
  VIGIL_NVDEC_START="ffmpeg:96" VIGIL_NVDEC_START_SECONDS=8 VIGIL_NVDEC_RATE_LABEL=-after timeout 40 ./after.test -test.v -test.count 1 -test.run 'TestNVDECStart$' >>"$R/start.txt" 2>&1
  grep -E '^RESULT|^--- |FAIL|panic' "$R/start.txt" | cut -c1-400 | tee -a "$R/summary.txt"
fi
if ! late 205 rate; then
  echo "## rate" >>"$R/summary.txt"
  VIGIL_NVDEC_RATE="direct:14" VIGIL_NVDEC_RATE_LABEL=-before timeout 30 ./before.test -test.v -test.count 1 -test.run 'TestNVDECDecodeRate$' >>"$R/rate.txt" 2>&1
  VIGIL_NVDEC_RATE="direct:14" VIGIL_NVDEC_RATE_LABEL=-after timeout 30 ./after.test -test.v -test.count 1 -test.run 'TestNVDECDecodeRate$' >>"$R/rate.txt" 2>&1
  VIGIL_NVDEC_RATE="direct:14" VIGIL_NVDEC_RATE_LABEL=-after-profiled VIGIL_NVDEC_RATE_PROFILE=$R timeout 30 ./after.test -test.v -test.count 1 -test.run 'TestNVDECDecodeRate$' >>"$R/rate.txt" 2>&1
  late 190 rate-7-28 || VIGIL_NVDEC_RATE="direct:7,28" VIGIL_NVDEC_RATE_LABEL=-after timeout 40 ./after.test -test.v -test.count 1 -test.run 'TestNVDECDecodeRate$' >>"$R/rate.txt" 2>&1
  grep -E '^RESULT|^--- |FAIL|panic' "$R/rate.txt" | cut -c1-400 | tee -a "$R/summary.txt"
fi
if ! late 235 tests; then
  timeout 45 ./after.test -test.v -test.count 1 -test.run 'TestNVDECDirect|TestNVDECMatchesSoftware' >"$R/gpu-tests.txt" 2>&1
  { echo "## tests"; grep -E '^(--- |    --- |PASS|FAIL|ok)|bit-identical|decoders made|panic|Error:' "$R/gpu-tests.txt" | head -30; } | tee -a "$R/summary.txt"
fi
late 200 e2e128 || bench direct-128 cuda-direct.yaml 128
echo "elapsed $((SECONDS - T0)) s" | tee -a "$R/summary.txt"
finish
