#!/usr/bin/env bash
# The checks and timings that need a CUDA GPU, in one command, for a machine that already has a
# CUDA build of torch and Triton (e.g. a cluster node, or a lent H100/H200 whose python3 holds
# them): nothing is installed, memrnn runs from this checkout (PYTHONPATH), every result goes to
# OUTDIR as a file named for what it holds.
#
#   bash scripts/gpu_checks.sh OUTDIR [tests] [precision] [stack] [breakdown] [nondeterministic] [compile]   (default: all)
#
#   tests             the Triton kernels compiled on the GPU against the reference loops
#                     (the tests/ops/test_<mechanism>.py of every mechanism with a kernel, their CPU
#                     paths' tests too, and tests/ops/test_kernels.py, then the gpu-marked layer tests;
#                     JOBS workers): tests.txt
#   precision         every kernel's float32 error against its float64 reference loop, beside
#                     torch's own float32 error (benchmarks/kernel_precision.py): precision.md
#   stack             the stack RNNs' two kernels against cuDNN's nn.LSTM (issue 23's cell: batch
#                     64, controller 64, width 8; every memory, LSTM and Elman controllers): stack-rnn.md
#   breakdown         where a stack RNN's step time goes: µs per step against the batch (16-256)
#                     and the depth (2, 32), beside memrnn's Elman kernel and cuDNN, and with
#                     the weights loaded at every step (the path before they were preloaded), 32
#                     rows per program, or TF32 products (benchmarks/stack_rnn_breakdown.py): breakdown.md
#   nondeterministic  DuSell & Chiang's RNS-RNN (and the vector RNS-RNN) on the Triton run against
#                     the torch step, time and memory against T: nondeterministic.md
#   compile           the kernels' registers and spills as this GPU's Triton compiles them: kernels.md
#
# Each part takes a few minutes on an H100; PYTHON picks the interpreter (default python3).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bash scripts/gpu_checks.sh OUTDIR [tests] [precision] [stack] [breakdown] [nondeterministic] [compile]}
shift
PARTS=${*:-tests precision stack breakdown nondeterministic compile}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
if ! "$PY" -c "import torch, triton, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_checks: $PY has no CUDA device (or no torch/triton); nothing to do here" >&2
  exit 2
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
  "$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
  # a copied checkout's .git can lag its files (the device tool's did): MEMRNN_COMMIT names the
  # commit the caller sent, and a digest of the tracked sources pins what ran
  echo "commit: ${MEMRNN_COMMIT:-$(git rev-parse HEAD 2>/dev/null) (per .git)}"
  echo "sources: $(cat memrnn/ops/*/triton.py memrnn/ops/*.py | sha256sum | cut -c1-16) (sha256 of memrnn/ops' Python)"
} | tee "$OUT/device.txt"
status=0
for part in $PARTS; do
  case "$part" in
    tests)
      # JOBS pytest workers (pytest-xdist, when there) share the GPU: the kernels' compilation is
      # most of this part's time, and it runs on the CPU
      XDIST=()
      if "$PY" -c "import xdist" 2>/dev/null; then XDIST=(-n "${JOBS:-8}"); fi
      {
        rc=0
        "$PY" -m pytest -q -p no:cacheprovider -m "gpu or not slow" -o addopts="" "${XDIST[@]}" \
          tests/ops/test_kernels.py tests/ops/test_stack_rnn.py tests/ops/test_nnpda.py tests/ops/test_nondeterministic.py \
          tests/ops/test_{elman,lstm,counter,jordan,second_order_rnn}.py \
          tests/ops/test_{superposition,stratification,queue,tape,deque}.py || rc=1
        "$PY" -m pytest -q -p no:cacheprovider -m gpu -o addopts="" "${XDIST[@]}" \
          tests/layers/test_fast_paths.py tests/core/test_interface.py tests/core/test_checks.py \
          tests/rsm/test_machine.py || rc=1
        exit $rc
      } 2>&1 | tee "$OUT/tests.txt" || status=1
      ;;
    precision)
      "$PY" -m benchmarks.kernel_precision --device cuda 2>&1 | tee "$OUT/precision.md" || status=1
      ;;
    stack)
      "$PY" benchmarks/stack_rnn_speed.py --device cuda --lengths 256 64 1024 --repeats 10 \
        --memories superposition stratification queue tape tape_jump deque 2>&1 | tee "$OUT/stack-rnn.md" || status=1
      ;;
    breakdown)
      {
        "$PY" benchmarks/stack_rnn_breakdown.py
        # one variant per process: Triton compiles each on first use
        for variant in "--no-preload" "--block-b 32" "--precision tf32"; do
          # shellcheck disable=SC2086
          "$PY" benchmarks/stack_rnn_breakdown.py --batches 64 --memories superposition --no-baselines $variant
        done
      } 2>&1 | tee "$OUT/breakdown.md" || status=1
      ;;
    nondeterministic)
      {
        "$PY" -m benchmarks.nondeterministic_scaling --device cuda --impls triton cpu --lengths 16 32 64 128 \
          --max-unlimited 128 --max-torch-unlimited 64 --repeats 5
        "$PY" -m benchmarks.nondeterministic_scaling --device cuda --impls triton cpu --lengths 32 64 128 \
          --max-unlimited 64 --max-torch-unlimited 32 --repeats 5 --vector-size 5
        "$PY" -m benchmarks.nondeterministic_scaling --device cuda --impls triton --lengths 80 --batch 10 \
          --max-unlimited 80 --repeats 10  # DuSell & Chiang's training batch (and depth 16)
      } 2>&1 | tee "$OUT/nondeterministic.md" || status=1
      ;;
    compile)
      "$PY" -m benchmarks.kernel_compile --targets 90 --dtypes float32 float64 2>&1 | tee "$OUT/kernels.md" || status=1
      ;;
    *)
      echo "gpu_checks: unknown part '$part' (tests, precision, stack, breakdown, nondeterministic, compile)" >&2
      status=2
      ;;
  esac
done
exit $status
