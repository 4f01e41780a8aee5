#!/usr/bin/env bash
# Call D (2026-12-02, third session), on the machine call C left warm.
# In calls B and C the hybrid 200-stream points ran batches of 13-19
# frames at 15-19 ms each (NVDEC only at 176: 37 frames at 15.1 ms), on
# the batch-32 engine (infer.batch_sizes [1, 8, 32, 64]): a 16-frame batch
# paid for 32. Config only, same binary (.carry/t1), 200 streams, 176 on
# NVDEC and 24 on the CPU:
# 1. batch_sizes [1, 8, 16, 32, 64] (a .b16 copy made here, as call A's);
# 2. the same with pipeline.max_queue_delay_us 8000 (4000 before);
# then BenchmarkViewerCost (issue 19), now 6 rounds whose order rotates
# (.carry/t2: app.test at this commit, linked to the same static FFmpeg).
set -uo pipefail
D=/tmp/eng; R=$OUT; T0=$SECONDS
[ -s "$D/lib/libonnxruntime_providers_cuda.so" ] || { echo "no ONNX Runtime in /tmp/eng/lib: the machine went cold" | tee "$R/summary-d.txt"; exit 1; }
xz -dc -T0 .carry/t1/vigil.xz >$D/vigil && chmod +x $D/vigil
xz -dc -T0 .carry/t2/app.test.xz >$D/app.test && chmod +x $D/app.test
ld=$D/lib
for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do [ -d "$d" ] && ld="$ld:$d"; done
export LD_LIBRARY_PATH=$ld VIGIL_ORT_LIBRARY=$D/lib/libonnxruntime.so.1
python3 $D/batch_models.py $D/models/yolox_nano.onnx 16 >$R/setup-d.txt 2>&1
{ date -u; $D/vigil version; sha256sum $D/vigil $D/app.test $D/models/*; cat /proc/loadavg; } >$R/machine-d.txt 2>&1
cd $D || exit 1
NV=10974535021
hy() { # file queue_delay_us
cat >$1 <<YAML
infer: {batch_sizes: [1, 8, 16, 32, 64], cuda_graph: true}
decode: {hwaccel: hybrid, nvdec: direct, hw_surfaces: 8, nvdec_pixel_rate: $NV, cpu_pixel_rate: $((NV * 24 / 176))}
pipeline: {max_queue_delay_us: $2}
YAML
}
hy h176-b16.yaml 4000; hy h176-b16-q8.yaml 8000
b() { # name limit_s config args...
  local n=$1 lim=$2 c=$3; shift 3
  nvidia-smi dmon -s u -d 1 -o T >"$D/dmon-$n.txt" 2>&1 & local smi=$!
  echo "\$ vigil bench --streams --config $c ($(tr '\n' ' ' <$c)) --model yolox-nano --source cam1080.mp4 --budget-ms 100 $*" >"$D/$n.txt"
  VIGIL_CACHE_DIR=$D timeout $lim ./vigil bench --streams --config $c --model yolox-nano --source cam1080.mp4 --budget-ms 100 "$@" >>"$D/$n.txt" 2>&1
  echo "exit status $? after $((SECONDS - T0)) s" >>"$D/$n.txt"
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  grep -v cudnn_fe_call "$D/$n.txt" >"$R/$n.txt"
}
b d-h176-b16 150 h176-b16.yaml --ceiling 0 --warmup 10s --each 6s --start 200 --max-streams 200
b d-h176-b16-q8 150 h176-b16-q8.yaml --ceiling 0 --warmup 10s --each 6s --start 200 --max-streams 200
for n in d-h176-b16 d-h176-b16-q8; do echo "== $n"; cat $D/dmon-$n.txt; done >$R/dmon-d.txt
grep -hE '^\$|ceiling|^ +[0-9]+ +[0-9.]+ +[0-9.]+|drops:|by decoder|fails|result|acceptance|panic|exit status' $R/d-*.txt | cut -c1-600 | tee $R/summary-d.txt
VIGIL_CACHE_DIR=$D/cache timeout 280 ./app.test -test.run '^$' -test.bench BenchmarkViewerCost -test.benchtime=1x -test.v >$R/viewer-cost-d.txt 2>&1
echo "viewer cost: exit status $? after $((SECONDS - T0)) s" >>$R/viewer-cost-d.txt
grep -E 'against none|all rounds|exit status' $R/viewer-cost-d.txt | cut -c1-300 | tee -a $R/summary-d.txt
