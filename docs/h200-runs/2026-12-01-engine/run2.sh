#!/usr/bin/env bash
# run2.sh (call 2, on the machine call 1 left warm: /tmp/eng holds ONNX
# Runtime, vigil, the models and env.sh): infer/gpu's GPU tests, the
# precision agreement over 1,000 frames each of vtest and cam1080, then
# CUDA graphs on and off with direct NVDEC end to end at one stream count.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
D=/tmp/eng
R=$OUT
T0=$SECONDS
[ -s "$D/env.sh" ] || { echo "no /tmp/eng: the machine went cold between the calls" | tee "$R/summary.txt"; exit 1; }
. "$D/env.sh"
mkdir -p "$D/media"
cp "$C/vtest.avi" "$D/media/"
cp "$C/cam1080.mp4" "$C"/*.yaml "$D/"
xz -dc "$C/gpu.test.xz" >"$D/gpu.test" && chmod +x "$D/gpu.test"
cd "$D" || exit 1
sha256sum gpu.test media/vtest.avi cam1080.mp4 >"$R/machine2.txt"
echo "## gpu tests" | tee -a "$R/summary.txt"
VIGIL_H264=$D/cam1080.mp4 VIGIL_YOLOX=$D/models/yolox_nano.onnx timeout 150 ./gpu.test -test.v -test.count 1 \
  -test.run 'TestGraphsWithDirectNVDEC|TestFP16AgreesOnGPU|TestBatchMatchesBatch1OnGPU|TestYOLOXGPUMatchesCPU|TestNVDECFramesMatchSoftware' >"$R/gpu-tests.txt" 2>&1
echo "exit status $?" >>"$R/gpu-tests.txt"
grep -E '^(--- |    --- |PASS|FAIL|ok)|match|panic|Error:|exit status|precision' "$R/gpu-tests.txt" | cut -c1-250 | tee -a "$R/summary.txt"
echo "## agreement" | tee -a "$R/summary.txt"
echo '$ vigil bench --gpu --model yolox-nano --source cam1080.mp4 --batches 32 --precisions fp16,tf32 --instances 1 --graph-only --model-only --duration 300ms --agree 1000 --agree-sources media/vtest.avi,cam1080.mp4' >"$R/agreement.txt"
timeout 120 ./vigil bench --gpu --model yolox-nano --source cam1080.mp4 --batches 32 --precisions fp16,tf32 --instances 1 --graph-only \
  --model-only --duration 300ms --agree 1000 --agree-sources media/vtest.avi,cam1080.mp4 >>"$R/agreement.txt" 2>&1
echo "exit status $?" >>"$R/agreement.txt"
grep -E 'agreement|frames, same|rror|exit status' "$R/agreement.txt" | cut -c1-400 | tee -a "$R/summary.txt"
for g in on off; do
  if [ $((SECONDS - T0)) -gt 230 ]; then echo "## graphs-$g: skipped (time)" | tee -a "$R/summary.txt"; continue; fi
  echo "\$ vigil bench --streams --config graphs-$g.yaml --model yolox-nano --source cam1080.mp4 --ceiling 0 --warmup 6s --each 5s --budget-ms 100 --start 64 --step 32 --max-streams 64" >"$R/graphs-$g.txt"
  timeout 45 ./vigil bench --streams --config "graphs-$g.yaml" --model yolox-nano --source cam1080.mp4 --ceiling 0 \
    --warmup 6s --each 5s --budget-ms 100 --start 64 --step 32 --max-streams 64 >>"$R/graphs-$g.txt" 2>&1
  echo "exit status $?" >>"$R/graphs-$g.txt"
  { echo "## graphs-$g"; grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+|result|model loaded|panic|rror|exit status' "$R/graphs-$g.txt" | cut -c1-300; } | tee -a "$R/summary.txt"
done
echo "elapsed $((SECONDS - T0)) s" | tee -a "$R/summary.txt"
