#!/usr/bin/env bash
# memrnn's one entry point for set-up, the default job and the tests.
#   bash scripts/dev.sh train [ARGS]   set up, then train the default config (ARGS go to train.py)
#   bash scripts/dev.sh test  [ARGS]   set up, then lint and run the fast tests (ARGS go to pytest),
#                                      in MEMRNN_TEST_WORKERS processes (pytest-xdist; default 2, 0: one)
#   bash scripts/dev.sh slow  [ARGS]   set up, then run only the slow tests: the reproductions and the
#                                      sweep that compiles every Triton kernel launch for sm_90 and
#                                      holds its spills to the committed table (the default run
#                                      compiles each kernel once: tests/ops/test_kernels_compile.py);
#                                      that sweep alone: `bash scripts/dev.sh slow tests/ops/test_kernels_compile.py`
#   bash scripts/dev.sh docs  [ARGS]   set up, then build the documentation site into site/ in strict
#                                      mode (ARGS go to `mkdocs build`; `serve` instead of ARGS serves it)
#   bash scripts/dev.sh setup          only set up
# Set-up makes .venv (once), installs torch (TORCH_SPEC, default torch==2.13.0; set TORCH_SPEC=""
# to keep whatever torch the venv has, e.g. your CUDA build) and, on Linux x86-64, Triton
# (TRITON_SPEC, default triton==3.9.0, whose interpreter and compiler the kernel tests use; set
# TRITON_SPEC="" with a CUDA torch, which brings its own), then memrnn with its dev and docs extras.
# It is skipped when nothing it depends on has changed.
# train and test run torch with one intra-op thread unless OMP_NUM_THREADS is set: at the default
# job's sizes a second thread gains nothing on an idle 2-core machine (57 s vs 51 s) and costs 3x
# when the other core is busy (144 s vs 49 s; docs/guide/training.md, "Threads").
set -euo pipefail
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
cd "$(dirname "$0")/.."

PYTHON_BIN=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC-torch==2.13.0}
TRITON_SPEC=${TRITON_SPEC-triton==3.9.0}
if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  TRITON_SPEC=""
fi

setup() {
  if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON_BIN" -m venv "$VENV"
  fi
  local stamp
  stamp=$(cat pyproject.toml scripts/dev.sh | sha256sum | cut -c1-16)-${TORCH_SPEC}-${TRITON_SPEC}
  if [ "$(cat "$VENV/.setup-stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "setting up $VENV (torch: ${TORCH_SPEC:-as installed}, triton: ${TRITON_SPEC:-as installed}) ..." >&2
    if [ -n "$TORCH_SPEC$TRITON_SPEC" ]; then
      # shellcheck disable=SC2086  # an empty spec adds no argument
      "$VENV/bin/python" -m pip install -q --disable-pip-version-check $TORCH_SPEC $TRITON_SPEC
    fi
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[dev,docs]"
    echo "$stamp" > "$VENV/.setup-stamp"
  fi
}

cmd=${1:-}
shift || true
case "$cmd" in
  setup) setup ;;
  train)
    setup
    exec "$VENV/bin/python" train.py fit --config configs/dyck/lstm_k2_m3.yaml "$@"
    ;;
  test)
    setup
    "$VENV/bin/ruff" check .
    "$VENV/bin/ruff" format --check .
    # loadgroup: tests marked with one xdist_group (a shared folder built up in order) share a worker;
    # --durations lists the slowest tests on every run, so that a test that grows is seen when it grows
    exec "$VENV/bin/python" -m pytest -n "${MEMRNN_TEST_WORKERS:-2}" --dist loadgroup --durations=25 --durations-min=10 "$@"
    ;;
  docs)
    setup
    export NO_MKDOCS_2_WARNING=1
    if [ "${1:-}" = serve ]; then
      shift
      exec "$VENV/bin/mkdocs" serve "$@"
    fi
    exec "$VENV/bin/mkdocs" build --strict "$@"
    ;;
  slow)
    setup
    exec "$VENV/bin/python" -m pytest -m slow "$@"
    ;;
  *)
    echo "usage: bash scripts/dev.sh {setup|train|test|slow|docs} [args]" >&2
    exit 2
    ;;
esac
