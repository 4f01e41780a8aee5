#!/usr/bin/env bash
# Call C (2026-12-02, third session), after call A on a cold machine.
# Call B's hybrid points had Go scheduling P99 10.5-12.6 ms (0.39 ms NVDEC
# only) and NVDEC streams offered under their rate. Hypothesis: every
# source goroutine is locked to its OS thread while its input is open
# (decode/log.go attach), so a software decoder's thread, at nice 10,
# holds one of GOMAXPROCS's Ps whenever it runs Go code, and the kernel
# leaves it waiting behind nice-0 threads: the other goroutines of that P
# wait with it. Test: the same binary and 200-stream point (176 on NVDEC,
# 24 on the CPU) with more Ps than cores: GOMAXPROCS=48 and 32.
# Carried: .carry/t1 (vigil.xz).
set -uo pipefail
C=.carry/t1; D=/tmp/eng; R=$OUT; T0=$SECONDS
[ -s "$D/lib/libonnxruntime_providers_cuda.so" ] || { echo "no ONNX Runtime in /tmp/eng/lib: the machine went cold" | tee "$R/summary-c.txt"; exit 1; }
xz -dc -T0 $C/vigil.xz >$D/vigil && chmod +x $D/vigil
ld=$D/lib
for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do [ -d "$d" ] && ld="$ld:$d"; done
export LD_LIBRARY_PATH=$ld VIGIL_ORT_LIBRARY=$D/lib/libonnxruntime.so.1 VIGIL_CACHE_DIR=$D
{ date -u; $D/vigil version; sha256sum $D/vigil; cat /proc/loadavg; } >$R/machine-c.txt 2>&1
cd $D || exit 1
NV=10974535021
cat >h176.yaml <<YAML
infer: {batch_sizes: [1, 8, 32, 64], cuda_graph: true}
decode: {hwaccel: hybrid, nvdec: direct, hw_surfaces: 8, nvdec_pixel_rate: $NV, cpu_pixel_rate: $((NV * 24 / 176))}
pipeline: {max_queue_delay_us: 4000}
YAML
b() { # name limit_s gomaxprocs config args...
  local n=$1 lim=$2 g=$3 c=$4; shift 4
  nvidia-smi dmon -s u -d 1 -o T >"$D/dmon-$n.txt" 2>&1 & local smi=$!
  echo "\$ GOMAXPROCS=$g vigil bench --streams --config $c ($(tr '\n' ' ' <$c)) --model yolox-nano --source cam1080.mp4 --budget-ms 100 $*" >"$D/$n.txt"
  GOMAXPROCS=$g timeout $lim ./vigil bench --streams --config $c --model yolox-nano --source cam1080.mp4 --budget-ms 100 "$@" >>"$D/$n.txt" 2>&1
  echo "exit status $? after $((SECONDS - T0)) s" >>"$D/$n.txt"
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  grep -v cudnn_fe_call "$D/$n.txt" >"$R/$n.txt"
}
b c-h176-g48 150 48 h176.yaml --ceiling 0 --warmup 10s --each 6s --start 200 --max-streams 200
b c-h176-g32 150 32 h176.yaml --ceiling 0 --warmup 10s --each 6s --start 200 --max-streams 200
for n in c-h176-g48 c-h176-g32; do echo "== $n"; cat $D/dmon-$n.txt; done >$R/dmon-c.txt
grep -hE '^\$|ceiling|^ +[0-9]+ +[0-9.]+ +[0-9.]+|drops:|by decoder|fails|result|acceptance|panic|exit status' $R/c-*.txt | cut -c1-600 | tee $R/summary-c.txt
