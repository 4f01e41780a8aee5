#!/usr/bin/env bash
# Call B (2026-12-02, third session), on the machine call A
# (../2026-12-02-hybrid/call-a.sh) left warm. vigil at the commit in
# machine-b.txt, with its defaults on GPUs (fp16, two instances,
# cudnn_conv_algo_search heuristic, decode.cpu_nice 10): nobody had run the
# heuristic default together with hybrid decoding.
# 1. NVDEC only, 176 streams (does this commit hold what 12-01's did?);
# 2. hybrid 200 streams, 170 on NVDEC and 30 on the CPU;
# 3. hybrid 200 streams, 176 on NVDEC and 24 on the CPU.
# The split is set through the placement's capacities: with equal stream
# weights the placer fills NVDEC and the CPU in the ratio
# nvdec_pixel_rate : cpu_pixel_rate (pipeline.NewPlacerCapacity).
# Carried: .carry/t1 (vigil.xz).
set -uo pipefail
C=.carry/t1; D=/tmp/eng; R=$OUT; T0=$SECONDS
[ -s "$D/lib/libonnxruntime_providers_cuda.so" ] || { echo "no ONNX Runtime in /tmp/eng/lib: the machine went cold" | tee "$R/summary-b.txt"; exit 1; }
xz -dc -T0 $C/vigil.xz >$D/vigil && chmod +x $D/vigil
ld=$D/lib
for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do [ -d "$d" ] && ld="$ld:$d"; done
export LD_LIBRARY_PATH=$ld VIGIL_ORT_LIBRARY=$D/lib/libonnxruntime.so.1 VIGIL_CACHE_DIR=$D
{ date -u; $D/vigil version; sha256sum $D/vigil; cat /proc/loadavg; } >$R/machine-b.txt 2>&1
cd $D || exit 1
cat >nv.yaml <<YAML
infer: {batch_sizes: [1, 8, 32, 64], cuda_graph: true}
decode: {hwaccel: cuda, nvdec: direct, hw_surfaces: 8}
pipeline: {max_queue_delay_us: 4000}
YAML
NV=10974535021
hy() { # file nvdec_streams cpu_streams
cat >$1 <<YAML
infer: {batch_sizes: [1, 8, 32, 64], cuda_graph: true}
decode: {hwaccel: hybrid, nvdec: direct, hw_surfaces: 8, nvdec_pixel_rate: $NV, cpu_pixel_rate: $((NV * $3 / $2))}
pipeline: {max_queue_delay_us: 4000}
YAML
}
hy h170.yaml 170 30; hy h176.yaml 176 24
b() { # name limit_s config args...
  local n=$1 lim=$2 c=$3; shift 3
  nvidia-smi dmon -s u -d 1 -o T >"$D/dmon-$n.txt" 2>&1 & local smi=$!
  echo "\$ vigil bench --streams --config $c ($(tr '\n' ' ' <$c)) --model yolox-nano --source cam1080.mp4 --budget-ms 100 $*" >"$D/$n.txt"
  timeout $lim ./vigil bench --streams --config $c --model yolox-nano --source cam1080.mp4 --budget-ms 100 "$@" >>"$D/$n.txt" 2>&1
  echo "exit status $? after $((SECONDS - T0)) s" >>"$D/$n.txt"
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  grep -v cudnn_fe_call "$D/$n.txt" >"$R/$n.txt"
}
b b-nv176 130 nv.yaml --ceiling 0 --warmup 10s --each 6s --start 176 --max-streams 176
b b-h170 170 h170.yaml --ceiling 0 --warmup 10s --each 6s --start 200 --max-streams 200
b b-h176 170 h176.yaml --ceiling 0 --warmup 10s --each 6s --start 200 --max-streams 200
for n in b-nv176 b-h170 b-h176; do echo "== $n"; cat $D/dmon-$n.txt; done >$R/dmon-b.txt
grep -hE '^\$|ceiling|^ +[0-9]+ +[0-9.]+ +[0-9.]+|drops:|fails|result|acceptance|panic|exit status' $R/b-*.txt | cut -c1-600 | tee $R/summary-b.txt
