#!/usr/bin/env bash
# run-c.sh (acceptance call 3b, on the machine call 3a left warm with ONNX
# Runtime in /tmp/eng/lib): vigil at the commit in machine3.txt with fp16 x2
# as the GPU default and the real-time pass rule; `vigil bench --streams`
# with hybrid decoding (direct NVDEC + CPU) at the pixel rates call 2
# measured, 192..240 cam1080 streams, YOLOX-Nano; nvidia-smi dmon beside.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
D=/tmp/eng
R=$OUT
T0=$SECONDS
[ -s "$D/lib/libonnxruntime_providers_cuda.so" ] || { echo "no ONNX Runtime in /tmp/eng/lib: the machine went cold" | tee "$R/summary3.txt"; exit 1; }
mkdir -p "$D/models"
xz -dc -T0 "$C/vigil.xz" >"$D/vigil" && chmod +x "$D/vigil"
xz -dc "$C/yolox_nano.onnx.xz" >"$D/models/yolox_nano.onnx"
cp "$C/cam1080.mp4" "$D/"
python3 scripts/batch_models.py "$D/models/yolox_nano.onnx" 8 32 64 >"$R/setup3.txt" 2>&1
ld=$D/lib
for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do
  [ -d "$d" ] && ld="$ld:$d"
done
export LD_LIBRARY_PATH=$ld VIGIL_CACHE_DIR=$D VIGIL_ORT_LIBRARY=$D/lib/libonnxruntime.so.1
cat >"$D/hybrid.yaml" <<YAML
infer: {batch_sizes: [1, 8, 32, 64], cuda_graph: true}
decode: {hwaccel: hybrid, nvdec: direct, hw_surfaces: 8, nvdec_pixel_rate: 10974535021, cpu_pixel_rate: 3271226779}
pipeline: {max_queue_delay_us: 4000}
YAML
cd "$D" || exit 1
{ date -u; nvidia-smi -L; echo "cores: $(nproc)"; ./vigil version; sha256sum vigil models/* cam1080.mp4 lib/*; cat hybrid.yaml; } >"$R/machine3.txt" 2>&1
nvidia-smi dmon -s u -d 1 -o T >"$R/dmon-hybrid.txt" 2>&1 &
smi=$!
echo "\$ vigil bench --streams --config hybrid.yaml --model yolox-nano --source cam1080.mp4 --ceiling 5s --warmup 10s --each 6s --budget-ms 100 --start 192 --step 16 --max-streams 240" >"$R/hybrid.txt"
timeout 330 ./vigil bench --streams --config hybrid.yaml --model yolox-nano --source cam1080.mp4 --ceiling 5s \
  --warmup 10s --each 6s --budget-ms 100 --start 192 --step 16 --max-streams 240 >>"$R/hybrid.txt" 2>&1
echo "exit status $? after $((SECONDS - T0)) s" >>"$R/hybrid.txt"
kill $smi 2>/dev/null; wait $smi 2>/dev/null
grep -v cudnn_fe_call "$R/hybrid.txt" | grep -E 'ceiling|^ +[0-9]+ +[0-9.]+ +[0-9.]+|NVDEC:|CPU:|fails|warm-up|result|acceptance|model loaded|panic|rror|exit status' | cut -c1-300 | tee "$R/summary3.txt"
