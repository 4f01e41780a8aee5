#!/usr/bin/env bash
# Call D (2026-12-02, second session), after call A again (the machine had
# gone cold): why 12-02's runs carried less than 12-01's acceptance run
# (engine ceiling 6,686.8 against 8,384.1 fps; Go scheduling P99 5-25 ms
# against 0.23 ms). That run set infer.cudnn_conv_algo_search: heuristic;
# 12-02's configs left the default, exhaustive. NVDEC only, YOLOX-Nano,
# fp16 x2 (GPU defaults), ceilings 5 s each:
# 1. this commit, heuristic: 160, 192, 224;
# 2. this commit, exhaustive (the default): 192;
# 3. 1eee294 (the acceptance run's binary), heuristic: 192.
# Carried: .carry/s6 (vigil.xz, vigil-old.xz).
set -uo pipefail
C=.carry/s6; D=/tmp/eng; R=$OUT; T0=$SECONDS
[ -s "$D/lib/libonnxruntime_providers_cuda.so" ] || { echo "no ONNX Runtime in /tmp/eng/lib: the machine went cold" | tee "$R/summary-d.txt"; exit 1; }
for b in vigil vigil-old; do xz -dc -T0 $C/$b.xz >$D/$b && chmod +x $D/$b; done
ld=$D/lib
for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do [ -d "$d" ] && ld="$ld:$d"; done
export LD_LIBRARY_PATH=$ld VIGIL_ORT_LIBRARY=$D/lib/libonnxruntime.so.1 VIGIL_CACHE_DIR=$D
{ date -u; $D/vigil version; $D/vigil-old version; sha256sum $D/vigil $D/vigil-old; cat /proc/loadavg; } >$R/machine-d.txt 2>&1
cd $D || exit 1
for s in heuristic exhaustive; do
cat >nv-$s.yaml <<YAML
infer: {batch_sizes: [1, 8, 32, 64], cuda_graph: true, cudnn_conv_algo_search: $s}
decode: {hwaccel: cuda, nvdec: direct, hw_surfaces: 8}
pipeline: {max_queue_delay_us: 4000}
YAML
done
b() { # name limit_s binary config args...
  local n=$1 lim=$2 bin=$3 c=$4; shift 4
  nvidia-smi dmon -s u -d 1 -o T >"$D/dmon-$n.txt" 2>&1 & local smi=$!
  echo "\$ $bin bench --streams --config $c ($(tr '\n' ' ' <$c)) --model yolox-nano --source cam1080.mp4 --budget-ms 100 $*" >"$D/$n.txt"
  timeout $lim ./$bin bench --streams --config $c --model yolox-nano --source cam1080.mp4 --budget-ms 100 "$@" >>"$D/$n.txt" 2>&1
  echo "exit status $? after $((SECONDS - T0)) s" >>"$D/$n.txt"
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  grep -v cudnn_fe_call "$D/$n.txt" >"$R/$n.txt"
}
b d-heur 230 vigil nv-heuristic.yaml --ceiling 5s --warmup 10s --each 6s --start 160 --step 32 --max-streams 224
b d-exh 150 vigil nv-exhaustive.yaml --ceiling 5s --warmup 10s --each 6s --start 192 --max-streams 192
b d-old-heur 150 vigil-old nv-heuristic.yaml --ceiling 5s --warmup 10s --each 6s --start 192 --max-streams 192
for n in d-heur d-exh d-old-heur; do echo "== $n"; cat $D/dmon-$n.txt; done >$R/dmon-d.txt
grep -hE '^\$|ceiling|^ +[0-9]+ +[0-9.]+ +[0-9.]+|drops:|fails|result|acceptance|panic|exit status' $R/d-*.txt | cut -c1-420 | tee $R/summary-d.txt
