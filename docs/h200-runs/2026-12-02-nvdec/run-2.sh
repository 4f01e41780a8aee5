#!/usr/bin/env bash
# Call 2 (2026-12-02), on the machine call 1 left warm (ONNX Runtime in
# /tmp/eng/lib): issue 16's soak, 10 minutes of `vigil run` with direct
# NVDEC and YOLOX-Nano (GPU defaults: fp16, 2 instances), 96 looped
# real-time cam1080 streams through the API, 8 removed and 8 added every
# 15 s (scripts/gpu-soak.py). Started in its own session so that it
# outlives this call; call 3 collects it. $1: decode.nvdec_poll.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
D=/tmp/eng; R=$OUT; T0=$SECONDS; POLL=${1:-0s}
[ -s "$D/lib/libonnxruntime_providers_cuda.so" ] || { echo "no ONNX Runtime in /tmp/eng/lib: the machine went cold" | tee "$R/soak.txt"; exit 1; }
mkdir -p $D/models
xz -dc -T0 $C/vigil.xz >$D/vigil && chmod +x $D/vigil
xz -dc $C/yolox_nano.onnx.xz >$D/models/yolox_nano.onnx
cp $C/cam1080.mp4 $D/; cp scripts/gpu-soak.py scripts/batch_models.py $D/
python3 $D/batch_models.py $D/models/yolox_nano.onnx 8 32 64 >$R/setup2.txt 2>&1
ld=$D/lib
for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib; do [ -d "$d" ] && ld="$ld:$d"; done
cat >$D/soak.yaml <<YAML
metrics: {listen: 127.0.0.1:9090}
api: {listen: 127.0.0.1:8080}
nats: {listen: 127.0.0.1:0}
data_dir: /tmp/eng/soak-data
decode: {hwaccel: cuda, nvdec: direct, hw_surfaces: 8, nvdec_poll: $POLL}
infer: {batch_sizes: [1, 8, 32, 64]}
pipeline: {queue_size: 4, progress_interval: 0s, max_queue_delay_us: 4000, budget_ms: 100}
YAML
{ date -u; $D/vigil version; sha256sum $D/vigil $D/models/* $D/cam1080.mp4; cat $D/soak.yaml; } >$R/machine2.txt 2>&1
cd $D || exit 1
echo "\$ gpu-soak.py --vigil ./vigil --config soak.yaml --clip cam1080.mp4 --base 96 --churn 8 --period 15 --minutes 10 --sample 30 --settle 60" >$D/soak.txt
LD_LIBRARY_PATH=$ld VIGIL_CACHE_DIR=$D VIGIL_ORT_LIBRARY=$D/lib/libonnxruntime.so.1 PYTHONUNBUFFERED=1 \
  setsid nohup python3 gpu-soak.py --vigil ./vigil --config soak.yaml --clip cam1080.mp4 --base 96 --churn 8 --period 15 \
  --minutes 10 --sample 30 --settle 60 --log soak-vigil.log >>$D/soak.txt 2>&1 </dev/null &
echo "soak started at $(date -u +%T) after $((SECONDS-T0)) s" | tee $D/soak-started.txt
nvidia-smi dmon -s um -d 5 -o T >$D/dmon-soak.txt 2>&1 &
while [ $((SECONDS-T0)) -lt 570 ]; do sleep 10; done
cp $D/soak.txt $D/soak-started.txt $D/dmon-soak.txt $R/ 2>/dev/null
tail -c 20000 $D/soak-vigil.log >$R/soak-vigil-tail.log
cat $D/soak.txt
