#!/usr/bin/env bash
# Call B (2026-12-02, second session), on the machine call A left warm:
# 1. TestNVDECDirectPictureCopy (issue 19: a direct-NVDEC stream's picture
#    copied out for snapshots is the software decoder's, sample for sample);
# 2. `vigil bench --streams` hybrid (direct NVDEC + CPU) with YOLOX-Nano:
#    176 streams with the placement of the collapsed run
#    (../2026-12-02-nvdec/hybrid.txt) and decode.cpu_nice 0, then 10; then
#    cpu_nice 10 with a smaller CPU share, from 176 up;
#    and cpu_nice 10 at 200 with a larger CPU share;
# 3. BenchmarkViewerCost (issue 19's cost, CPU provider) started in its own
#    session, collected by call C.
# Carried: .carry/s5 (vigil.xz, decode.test.xz, app.test.xz, clips/).
set -uo pipefail
W=$PWD; C=.carry/s5; D=/tmp/eng; R=$OUT; T0=$SECONDS
[ -s "$D/lib/libonnxruntime_providers_cuda.so" ] || { echo "no ONNX Runtime in /tmp/eng/lib: the machine went cold" | tee "$R/summary-b.txt"; exit 1; }
for b in vigil decode.test app.test; do xz -dc -T0 $C/$b.xz >$D/$b && chmod +x $D/$b; done
rm -rf $D/clips; cp -r $C/clips $D/clips
ld=$D/lib
for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do [ -d "$d" ] && ld="$ld:$d"; done
export LD_LIBRARY_PATH=$ld VIGIL_ORT_LIBRARY=$D/lib/libonnxruntime.so.1
{ date -u; $D/vigil version; sha256sum $D/vigil $D/decode.test $D/app.test; cat /proc/loadavg; } >$R/machine-b.txt 2>&1
# 1.
(cd decode && VIGIL_NVDEC_CLIPS=$D/clips timeout 120 $D/decode.test -test.run '^TestNVDECDirectPictureCopy$' -test.v 2>&1 | tail -20) >$R/picture-copy.txt
echo "picture copy done after $((SECONDS-T0)) s" | tee -a $R/summary-b.txt
# 2.
cd $D || exit 1
hy() { # file nice cpu_pixel_rate
cat >$1 <<YAML
infer: {batch_sizes: [1, 8, 32, 64], cuda_graph: true}
decode: {hwaccel: hybrid, nvdec: direct, hw_surfaces: 8, nvdec_pixel_rate: 10974535021, cpu_pixel_rate: $3, cpu_nice: $2}
pipeline: {max_queue_delay_us: 4000}
YAML
}
hy h-n0.yaml 0 3271226779; hy h-n10.yaml 10 3271226779; hy h-n10-small.yaml 10 1244160000; hy h-n10-200.yaml 10 2327000000
b() { # name limit_s config args...
  local n=$1 lim=$2 c=$3; shift 3
  nvidia-smi dmon -s u -d 1 -o T >"$D/dmon-$n.txt" 2>&1 & local smi=$!
  echo "\$ vigil bench --streams --config $c ($(tr '\n' ' ' <$c)) --model yolox-nano --source cam1080.mp4 --budget-ms 100 $*" >"$D/$n.txt"
  VIGIL_CACHE_DIR=$D timeout $lim ./vigil bench --streams --config $c --model yolox-nano --source cam1080.mp4 --budget-ms 100 "$@" >>"$D/$n.txt" 2>&1
  echo "exit status $? after $((SECONDS - T0)) s" >>"$D/$n.txt"
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  grep -v cudnn_fe_call "$D/$n.txt" >"$D/out-$n.txt"
}
b h176-nice0 110 h-n0.yaml --ceiling 0 --warmup 10s --each 6s --start 176 --max-streams 176
b h176-nice10 110 h-n10.yaml --ceiling 0 --warmup 10s --each 6s --start 176 --max-streams 176
b hsmall-nice10 150 h-n10-small.yaml --ceiling 0 --warmup 10s --each 6s --start 176 --step 16 --max-streams 192
b h200-nice10 110 h-n10-200.yaml --ceiling 0 --warmup 10s --each 6s --start 200 --max-streams 200
cat $D/out-h176-nice0.txt $D/out-h176-nice10.txt $D/out-hsmall-nice10.txt $D/out-h200-nice10.txt >$R/hybrid-b.txt
for n in h176-nice0 h176-nice10 hsmall-nice10 h200-nice10; do echo "== $n"; cat $D/dmon-$n.txt; done >$R/dmon-b.txt
echo "hybrid done after $((SECONDS-T0)) s" | tee -a $R/summary-b.txt
# 3.
cd $D && VIGIL_CACHE_DIR=$D/cache setsid nohup ./app.test -test.run '^$' -test.bench BenchmarkViewerCost -test.benchtime=1x -test.v >$D/viewer-cost.txt 2>&1 </dev/null &
echo "viewer cost started after $((SECONDS-T0)) s" | tee -a $R/summary-b.txt
grep -hE 'ceiling|^ +[0-9]+ +[0-9.]+ +[0-9.]+|fails|result|acceptance|panic|rror|exit status|drops:' $R/hybrid-b.txt | cut -c1-300 | tee -a $R/summary-b.txt
