#!/usr/bin/env bash
# run-b.sh (acceptance call 2 of 2, on the machine call 1 left warm: /tmp/eng
# holds ONNX Runtime, vigil, the models and env.sh). INST, PREC and SEARCH
# (environment) pick the engine configuration that call 1 measured best.
#   1. vigil bench --streams: vigil's own decode-only ceilings (direct NVDEC
#      x14, software on every core, both at once), the engine ceiling, then
#      128..224 looped real-time cam1080 streams on NVDEC with YOLOX-Nano,
#      and issue 16's acceptance line; nvidia-smi dmon beside it.
#   2. fp16 and tf32 against fp32 over 1,000 frames of vtest and cam1080.
#   3. infer/gpu's GPU tests of this session: graphs with direct NVDEC, fp16.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
D=/tmp/eng
R=$OUT
T0=$SECONDS
[ -s "$D/env.sh" ] || { echo "no /tmp/eng: the machine went cold between the calls" | tee "$R/summary.txt"; exit 1; }
. "$D/env.sh"
mkdir -p "$D/media"
cp "$C/vtest.avi" "$D/media/"
cp "$C/cam1080.mp4" "$D/"
xz -dc "$C/gpu.test.xz" >"$D/gpu.test" && chmod +x "$D/gpu.test"
cat >"$D/acc.yaml" <<YAML
infer: {batch_sizes: [1, 8, 32, 64], cuda_graph: true, precision: $PREC, instances: $INST, cudnn_conv_algo_search: $SEARCH}
decode: {hwaccel: cuda, nvdec: direct, hw_surfaces: 8}
pipeline: {max_queue_delay_us: 4000}
YAML
cd "$D" || exit 1
{ sha256sum gpu.test media/vtest.avi cam1080.mp4; cat acc.yaml; } >"$R/machine2.txt"
echo "## streams ($INST instances, $PREC, $SEARCH)" | tee -a "$R/summary.txt"
nvidia-smi dmon -s u -d 1 -o T >"$R/dmon-streams.txt" 2>&1 &
smi=$!
echo "\$ vigil bench --streams --config acc.yaml --model yolox-nano --source cam1080.mp4 --ceiling 5s --warmup 10s --each 6s --budget-ms 100 --start 128 --step 32 --max-streams 224" >"$R/streams.txt"
timeout 270 ./vigil bench --streams --config acc.yaml --model yolox-nano --source cam1080.mp4 --ceiling 5s \
  --warmup 10s --each 6s --budget-ms 100 --start 128 --step 32 --max-streams 224 >>"$R/streams.txt" 2>&1
echo "exit status $? after $((SECONDS - T0)) s" >>"$R/streams.txt"
kill $smi 2>/dev/null; wait $smi 2>/dev/null
grep -E 'ceiling|^ +[0-9]+ +[0-9.]+ +[0-9.]+|fails|warm-up|result|acceptance|pixel_rate|panic|rror|exit status' "$R/streams.txt" | cut -c1-300 | tee -a "$R/summary.txt"
if [ $((SECONDS - T0)) -lt 330 ]; then
  echo "## agreement" | tee -a "$R/summary.txt"
  echo '$ vigil bench --gpu --model yolox-nano --source cam1080.mp4 --batches 32 --precisions fp16,tf32 --instances 1 --conv-search heuristic --graph-only --model-only --duration 300ms --agree 1000 --agree-sources media/vtest.avi,cam1080.mp4' >"$R/agreement.txt"
  timeout 110 ./vigil bench --gpu --model yolox-nano --source cam1080.mp4 --batches 32 --precisions fp16,tf32 --instances 1 --conv-search heuristic --graph-only \
    --model-only --duration 300ms --agree 1000 --agree-sources media/vtest.avi,cam1080.mp4 >>"$R/agreement.txt" 2>&1
  echo "exit status $?" >>"$R/agreement.txt"
  grep -E 'agree|frames, same|rror|exit status' "$R/agreement.txt" | cut -c1-400 | tee -a "$R/summary.txt"
fi
if [ $((SECONDS - T0)) -lt 440 ]; then
  echo "## gpu tests" | tee -a "$R/summary.txt"
  VIGIL_H264=$D/cam1080.mp4 VIGIL_YOLOX=$D/models/yolox_nano.onnx timeout 90 ./gpu.test -test.v -test.count 1 \
    -test.run 'TestGraphsWithDirectNVDEC|TestFP16AgreesOnGPU' >"$R/gpu-tests.txt" 2>&1
  echo "exit status $?" >>"$R/gpu-tests.txt"
  grep -E '^(--- |    --- |PASS|FAIL|ok)|match|panic|Error:|exit status' "$R/gpu-tests.txt" | cut -c1-250 | tee -a "$R/summary.txt"
fi
echo "elapsed $((SECONDS - T0)) s" | tee -a "$R/summary.txt"
