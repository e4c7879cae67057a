#!/bin/bash
# One prepared run on a lent GPU machine: the GPU tests, then `taso bench --runtime cupy` on the zoo, one model at a
# time (each under its own timeout, results packed after each so a cut-off run still returns what it measured).
#
# On the device machine, from the repository root:  OUT=dir bash benchmarks/gpu/gpu_device_run.sh [MODEL ...]
# It needs python3 with numpy, onnx, onnxruntime, networkx, matplotlib, tqdm and cupy (the device image has them);
# taso is laid out from the checkout as pyproject's package-dir does, without pip (the machine has no index, and the
# optimizer does not import z3). Results: $OUT/results.tar.gz (each model's bench.json/.md/.png), $OUT/cache/costs.json
# (the GPU cost cache, reusable with TASO_CACHE_DIR), $OUT/run.log. A .gpu-cache/ folder in the checkout (carried to the
# device) seeds the cost cache; SKIP_TESTS=1 skips the tests; TIME_LIMIT, ROUNDS, MODEL_TIMEOUT as named.
# Merge runs into one report with benchmarks/gpu/gpu_merge.py.
set -u
repo=$(pwd)
OUT=${OUT:-/tmp/gpu-out}
TIME_LIMIT=${TIME_LIMIT:-15}
ROUNDS=${ROUNDS:-5}
MODEL_TIMEOUT=${MODEL_TIMEOUT:-150}
models=${*:-nasrnn bert squeezenet resnet50 inception_v3 resnext50 nasnet_a}
work=/tmp/taso-gpu
rm -rf "$work" && mkdir -p "$work/pkg/taso" "$work/res" "$OUT/cache"
cp -r "$repo/taso/." "$work/pkg/taso/"
for d in generator verifier specs models; do cp -r "$repo/$d" "$work/pkg/taso/$d"; done
export PYTHONPATH=$work/pkg${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TASO_CACHE_DIR=$OUT/cache
if [ -d "$repo/.gpu-cache" ]; then cp "$repo"/.gpu-cache/* "$OUT/cache/" && chmod u+w "$OUT"/cache/*; fi  # an earlier run's GPU costs
cd "$work"
exec > >(tee -a "$OUT/run.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
python3 -c "import numpy, onnx, onnxruntime, cupy; print('numpy', numpy.__version__, 'onnx', onnx.__version__, 'onnxruntime', onnxruntime.__version__, onnxruntime.get_available_providers(), 'cupy', cupy.__version__)"
if [ -z "${SKIP_TESTS:-}" ]; then
  echo "== GPU tests"
  timeout 180 python3 -m pytest -q -p no:cacheprovider "$repo/tests/test_gpu.py" 2>&1 | tail -25
fi
for m in $models; do
  echo "== $m"
  start=$(date +%s)
  case $m in *.onnx) m=$repo/$m;; esac
  timeout "$MODEL_TIMEOUT" python3 -m taso bench "$m" --runtime cupy --cost cupy --time-limit "$TIME_LIMIT" --rounds "$ROUNDS" --out "$work/res/$(basename "$m" .onnx)" 2>&1 | grep -v "^Hardware\|^$\|^|---" | tail -8
  echo "   ($(( $(date +%s) - start )) s)"
  tar -czf "$OUT/results.tar.gz" -C "$work" res
done
