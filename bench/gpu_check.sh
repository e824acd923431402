#!/usr/bin/env bash
# The GPU check (run only where a CUDA device is lent; CI never needs it). Under 5 minutes:
#   1. autotune doctor on cuda
#   2. bench/trainer.py --device cuda --synthetic (plain loop vs autotune.train, setting by setting)
#   3. a 6-trial grid over precision x channels_last (bench/gpu_check.yaml); compile's effect
#      is measured by step 2's "+ compile" arms (compiling in 6 more trials would not fit 5 minutes)
#   4. bench/memory.py on cuda: 60 trials in one process; CUDA allocated bytes back to the value before
#      the first trial after every trial, host RSS growth after the warm-up (exit 1 on a leak)
# Copy the printed figures (bf16/fp16 vs fp32 speed-up) into bench/RESULTS.md with the date and device.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-studies}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python -m autotune doctor --device cuda 2>&1 | tee "$OUT/doctor.txt"
python bench/trainer.py --device cuda --synthetic --repeats 3 2>&1 | tee "$OUT/trainer.txt"
python -m autotune run bench/gpu_check.yaml --fresh --plain --storage "sqlite:///$OUT/gpu.db" \
  2>&1 | tee "$OUT/study.txt"
python bench/memory.py --device cuda --trials 60 2>&1 | tee "$OUT/memory.txt"
