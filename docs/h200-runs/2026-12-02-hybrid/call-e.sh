#!/usr/bin/env bash
# Call E (2026-12-02, second session), after call A again: where between
# 1eee294 (12-01's acceptance binary: 192 NVDEC streams at P99 75.8 ms in
# call D) and 05745d6 (12-02's runs, already slow) the end-to-end path lost
# its speed. One point each, 192 streams, NVDEC only, heuristic conv search,
# no ceilings, with the binaries of three commits of main's first-parent
# history: 0949094 (degrade merged), aab7d51 (the INT8 work, before it),
# 728c8f5 (fleet merged, after it).
# Carried: .carry/s7 (vigil-<commit>.xz).
set -uo pipefail
C=.carry/s7; D=/tmp/eng; R=$OUT; T0=$SECONDS
[ -s "$D/lib/libonnxruntime_providers_cuda.so" ] || { echo "no ONNX Runtime in /tmp/eng/lib: the machine went cold" | tee "$R/summary-e.txt"; exit 1; }
ld=$D/lib
for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do [ -d "$d" ] && ld="$ld:$d"; done
export LD_LIBRARY_PATH=$ld VIGIL_ORT_LIBRARY=$D/lib/libonnxruntime.so.1 VIGIL_CACHE_DIR=$D
cd $D || exit 1
cat >nv-heuristic.yaml <<YAML
infer: {batch_sizes: [1, 8, 32, 64], cuda_graph: true, cudnn_conv_algo_search: heuristic}
decode: {hwaccel: cuda, nvdec: direct, hw_surfaces: 8}
pipeline: {max_queue_delay_us: 4000}
YAML
for c in 0949094 aab7d51 728c8f5; do
  xz -dc -T0 $OLDPWD/$C/vigil-$c.xz >$D/vigil-$c && chmod +x $D/vigil-$c
  echo "\$ vigil-$c bench --streams --config nv-heuristic.yaml ($(tr '\n' ' ' <nv-heuristic.yaml)) --model yolox-nano --source cam1080.mp4 --budget-ms 100 --ceiling 0 --warmup 10s --each 6s --start 192 --max-streams 192" >$D/e-$c.txt
  timeout 100 ./vigil-$c bench --streams --config nv-heuristic.yaml --model yolox-nano --source cam1080.mp4 --budget-ms 100 --ceiling 0 --warmup 10s --each 6s --start 192 --max-streams 192 >>$D/e-$c.txt 2>&1
  echo "exit status $? after $((SECONDS - T0)) s" >>$D/e-$c.txt
  grep -v cudnn_fe_call $D/e-$c.txt >$R/e-$c.txt
done
grep -hE '^\$|^ +[0-9]+ +[0-9.]+ +[0-9.]+|drops:|exit status' $R/e-*.txt | cut -c1-420 | tee $R/summary-e.txt
