#!/bin/bash
# The prepared run for a lent GPU: the torch runtime's tests, then the zoo and the recurrent and transformer exports,
# each optimized with GPU costs (`--cost torch`: device time in CUDA graphs) and timed against its input on the same
# runtime; then the same two files timed again in a fresh process (the second series); then merged into one report.
#
# On the device machine, from the repository root:   OUT=dir bash benchmarks/gpu/gpu_device_run.sh [MODEL ...]
# Before a lease, the same script end to end on the CPU: DRY_RUN=cpu OUT=dir bash benchmarks/gpu/gpu_device_run.sh squeezenet nasrnn
#
# It needs python3 with numpy, onnx, onnxruntime, matplotlib and torch (the device image has them; no network): taso
# is laid out from the checkout as pyproject's package-dir does, without pip. Writes $OUT/bench.json (device, driver,
# runtime, timing method, every row with both series), $OUT/bench.md (beside TASO's and Tensat's published speedups),
# $OUT/bench.png, $OUT/results.tar.gz (each series' own files, packed after each model so a cut-off run keeps what it
# measured), $OUT/cache/ (the cost cache, reusable with TASO_CACHE_DIR) and $OUT/run.log. A .gpu-cache/ folder in the
# checkout seeds the cost cache. SKIP_TESTS=1 skips the tests; TIME_LIMIT, ROUNDS, MODEL_TIMEOUT as named; no series
# starts after DEADLINE seconds (default 450: the device tool allows 10 minutes a command, and the results must be
# packed and merged before it ends).
set -u
repo=$(pwd)
OUT=${OUT:?set OUT to the directory for the results}
TIME_LIMIT=${TIME_LIMIT:-8}
ROUNDS=${ROUNDS:-7}
MODEL_TIMEOUT=${MODEL_TIMEOUT:-75}
DEADLINE=${DEADLINE:-450}
began=$(date +%s)
exports="tests/data/symbolic/lstm_cell_loop.torchscript.onnx tests/data/symbolic/gru_cell_loop.dynamo.onnx tests/data/symbolic/transformer_decoder.torchscript.onnx tests/data/symbolic/written_out_norms.dynamo.onnx"
models=${*:-nasrnn squeezenet resnext50 inception_v3 nasnet_a bert resnet50 $exports}
case "${DRY_RUN:-}" in
  "") export TASO_TORCH_DEVICE=cuda ;;
  cpu) export TASO_TORCH_DEVICE=cpu ;;
  *) echo "DRY_RUN=${DRY_RUN}: expected cpu (or unset on the device)" >&2; exit 2 ;;
esac
work=$(mktemp -d /tmp/taso-gpu.XXXXXX)
mkdir -p "$work/pkg/taso" "$work/res" "$OUT/cache"
OUT=$(cd "$OUT" && pwd)
cp -r "$repo/taso/." "$work/pkg/taso/"
for d in generator verifier specs models; do cp -r "$repo/$d" "$work/pkg/taso/$d"; done
export PYTHONPATH=$work/pkg${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TASO_CACHE_DIR=$OUT/cache
if [ -d "$repo/.gpu-cache" ]; then cp "$repo"/.gpu-cache/* "$OUT/cache/" && chmod u+w "$OUT"/cache/*; fi  # an earlier run's costs
exec > >(tee -a "$OUT/run.log") 2>&1
if [ -z "${DRY_RUN:-}" ]; then nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv; fi
python3 -c "import numpy, onnx, onnxruntime, torch; print('numpy', numpy.__version__, 'onnx', onnx.__version__, 'onnxruntime', onnxruntime.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'gpu', torch.cuda.is_available())"
if [ -z "${SKIP_TESTS:-}" ]; then
  echo "== the torch runtime's tests"
  (cd "$repo" && timeout 240 python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/test_torch_runtime.py -k "not device_script" 2>&1 | tail -15)
fi
for m in $models; do
  case $m in *.onnx) m=$repo/$m;; esac
  name=$(basename "$m" .onnx)
  over() { [ $(( $(date +%s) - began )) -ge "$DEADLINE" ]; }
  if over; then echo "== $name: not started (DEADLINE=${DEADLINE} s passed)"; continue; fi
  echo "== $name, series 1: taso bench (the search with GPU costs, the guard, the timing)"
  start=$(date +%s)
  (cd "$work" && timeout "$MODEL_TIMEOUT" python3 -m taso bench "$m" --runtime torch --cost torch --time-limit "$TIME_LIMIT" \
    --rounds "$ROUNDS" --out "$work/res/$name/s1" 2>&1 | grep -v "^Hardware\|^Runtime\|^$\|^|---\|^| model" | tail -4)
  echo "   ($(( $(date +%s) - start )) s)"
  kept="$work/res/$name/s1/$name.taso.onnx"
  if [ -f "$kept" ] && ! over; then  # the same two files again, in a fresh process: the second series
    echo "== $name, series 2: the input and the kept model timed again"
    mkdir -p "$work/res/$name/s2"
    (cd "$work" && timeout "$MODEL_TIMEOUT" python3 "$repo/benchmarks/gpu/retime.py" "$m" "$kept" --rounds "$ROUNDS" --out "$work/res/$name/s2/retime.json" 2>&1 | tail -2)
  fi
  tar -czf "$OUT/results.tar.gz" -C "$work" res
  (cd "$work" && python3 "$repo/benchmarks/gpu/gpu_merge.py" "$work/res" --out "$OUT" > /dev/null) || echo "   (nothing to merge yet)"
done
(cd "$work" && python3 "$repo/benchmarks/gpu/gpu_merge.py" "$work/res" --out "$OUT")
