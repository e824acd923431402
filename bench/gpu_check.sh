#!/usr/bin/env bash
# The GPU check (run only where a CUDA device is lent; CI never needs it). Under 5 minutes:
#   1. autotune doctor on cuda
#   2. bench/trainer.py --device cuda --synthetic (plain loop vs autotune.train, setting by setting)
#   3. a 6-trial grid over precision x channels_last (bench/gpu_check.yaml); compile's effect
#      is measured by step 2's "+ compile" arms (compiling in 6 more trials would not fit 5 minutes)
#   4. on-device augmentation: its cost per batch (bench/augment.py) and the test that it never
#      waits for the device (torch.cuda.set_sync_debug_mode("error"))
#   5. ResNet-20 on synthetic 3x32x32 data, 4 trials over precision x channels_last (bench/gpu_resnet.yaml)
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
python bench/augment.py --device cuda --repeats 30 2>&1 | tee "$OUT/augment.txt"
python -m pytest -q -m gpu tests/test_augment.py 2>&1 | tee "$OUT/augment_test.txt"
python -m autotune run bench/gpu_resnet.yaml --fresh --plain --storage "sqlite:///$OUT/gpu-resnet.db" \
  2>&1 | tee "$OUT/resnet.txt"
