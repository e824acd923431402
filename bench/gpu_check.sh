#!/usr/bin/env bash
# The GPU check, for a bare GPU machine with no network (CI never needs it). Under 5 minutes on one H200.
#
#   bash bench/gpu_wheels.sh                 # first, where the package registries are: fills .whl/ (git-ignored)
#   bash bench/gpu_check.sh [--device cuda]  # then on the GPU machine, with .whl/ carried along
#   bash bench/gpu_check.sh --device cpu     # the same path on small sizes (a test of the check, not a benchmark)
#
# It installs autotune's missing dependencies from $WHEELS (default .whl) only -- pip never looks at an index --
# into a fresh folder put on PYTHONPATH with this checkout (no `pip install -e`), runs `autotune doctor`, then
# bench/gpu_check.py (matmul ceilings; resnet and small-CNN rows: fp32 with TF32 off as the baseline, TF32,
# bf16, fp16, channels_last, cold and warm compile, samples/s and CUDA memory, and each row's and trial's own
# peak_memory_mb and energy_j (NVML, from the nvidia-ml-py that machine has; doctor says whether it can); a trial on
# several devices: the resnet on 1 GPU vs devices min(2, GPUs visible) through DDP over NCCL -- on a one-GPU machine a world of one rank, the
# launcher's and DDP's own cost; autotune as a guest (bench/gpu_guest.py: a hang inside a CUDA synchronize under
# hang_seconds, the step hooks on fused/foreach CUDA optimizers, the HF and Lightning examples in bf16); a 6-trial
# study over precision x channels_last x compile), bench/augment.py, and
# bench/memory.py (60 trials in one process: CUDA allocated bytes back to trial 1's after every trial, host RSS
# growth). Everything printed also lands in $OUT (default studies/): gpu_check.txt (this output),
# gpu_check.json (the figures), gpu-check.db and gpu-check.html (the study). Copy the figures into bench/RESULTS.md
# with the date and device.
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=cuda
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --device=*) DEVICE="${1#--device=}"; shift ;;
    *) echo "usage: bash bench/gpu_check.sh [--device cuda|cpu]" >&2; exit 2 ;;
  esac
done
OUT="${OUT:-studies}"
WHEELS="${WHEELS:-.whl}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
export PYTHONUNBUFFERED=1
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# A cold compile is cold: inductor's and Triton's caches start empty on every run.
export TORCHINDUCTOR_CACHE_DIR="$TMP/inductor" TRITON_CACHE_DIR="$TMP/triton"

check() {
  if compgen -G "$WHEELS/*.whl" >/dev/null; then
    echo "== installing $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS (no index) into $TMP/site"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$TMP/site" \
      "$WHEELS"/*.whl
    export PYTHONPATH="$TMP/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "== no wheels in $WHEELS: using what python3 can import already (bench/gpu_wheels.sh makes them)"
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  fi
  if ! python3 -c "import optuna, pydantic, sqlalchemy, alembic, colorlog, cmaes, plotly, yaml, rich, sklearn, autotune"
  then
    echo "error: python3 cannot import autotune's dependencies: run bash bench/gpu_wheels.sh where the package" \
         "registries are and bring $WHEELS along" >&2
    return 2
  fi
  python3 -c "import sys, torch, optuna, pydantic; print('== python3', sys.version.split()[0], '| torch', \
torch.__version__, '| optuna', optuna.__version__, '| pydantic', pydantic.__version__)"
  echo "== autotune doctor --device $DEVICE --no-compile (compile is timed below)"
  python3 -m autotune doctor --device "$DEVICE" --no-compile
  python3 bench/gpu_check.py --device "$DEVICE" --out "$OUT"
  echo "== on-device augmentation: cost per batch, and the test that it never waits for the device"
  python3 bench/augment.py --device "$DEVICE" --repeats 30
  echo "== the epoch clock of a loop that breaks early and evaluates: epoch_time_s against its steps' own time"
  python3 bench/step_clock.py --device "$DEVICE" || echo "== step clock check FAILED"
  echo "== memory over a study: CUDA allocated bytes back to trial 1's after every trial, host RSS growth"
  python3 bench/memory.py --device "$DEVICE" --trials 60 || echo "== memory check FAILED (a leak)"
  if [ "$DEVICE" != cpu ]; then  # gpu_check.yaml trains on cuda: its probe table is the GPU's own
    echo "== autotune speed bench/gpu_check.yaml: samples/s of each precision x channels_last x compile combination"
    python3 -m autotune speed bench/gpu_check.yaml --budget 180 || echo "== autotune speed FAILED"
  fi
  if [ "$DEVICE" != cpu ] && python3 -c "import pytest" 2>/dev/null; then
    python3 -m pytest -q -p no:cacheprovider -m gpu tests/training_tests/test_augment.py || echo "== augmentation GPU test FAILED"
  fi
  # fold SQLite's write-ahead log (autotune opens studies in WAL mode) into gpu-check.db: one file to carry home
  if [ -f "$OUT/gpu-check.db" ]; then
    python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('PRAGMA journal_mode=DELETE')" \
      "$OUT/gpu-check.db"
  fi
}

set -o pipefail
check 2>&1 | tee "$OUT/gpu_check.txt"
echo "output in $OUT: $(cd "$OUT" && ls gpu_check.txt gpu_check.json gpu-check.db gpu-check.html 2>/dev/null | xargs)"
