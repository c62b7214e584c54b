#!/usr/bin/env bash
# One-shot GPU check of batched HPE (issue 14). Run from the repository root on a CUDA
# machine:   OUT=DIR bash benchmarks/gpu_hpe_check.sh
# The device image lacks open_clip: first run `bash scripts/device_wheels.sh` here, then on
# the device carry [".whl"] with the command
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; \
#     PYTHONUNBUFFERED=1 bash benchmarks/gpu_hpe_check.sh
# Dry-run the same code on CPU first (no device time): benchmarks/hpe_batching.py
#   --size base --ways 2 --shots 1 --queries 1 --epochs 1 --families linear-probe coop
# It prints the device, then one JSON line per family as it finishes, then a table, and
# writes DIR/hpe_batching_cuda.json. Everything stops after 270 s (about 3-4 minutes on one
# H200; families that would start after 190 s are reported as skipped).
#
# What it measures, on a random-init ViT-B/16 (timm; open_clip ViT-B-16 for CLIP families)
# at 224 px with bf16 autocast, one synthetic 20-way 5-shot episode (10 queries per class),
# fewtrans-paper grids with 20 centre epochs:
#   - batched/one: lockstep HPE wall over the longest single configuration (target for full
#     fine-tuning <= 4x; frozen heads <= 1.1x), looped/one and loop/batched (the loop is
#     projected from one configuration per epoch count), and the agreement of batched and
#     looped predictions (bf16 under vmap);
#   - MFU of batched full fine-tuning vs the bf16 dense peak (target >= 35%);
#   - the lockstep chunks the memory planner chose and the peak memory;
#   - cached (decoded-image file + feature cache) vs uncached linear-probe HPE over 20
#     digits episodes through the runner (target >= 10x).
set -u
OUT="${OUT:-.}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader || true
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
timeout 270 python benchmarks/hpe_batching.py --device cuda --budget-s 190 --out "$OUT" "$@" 2>&1 \
  | grep -v "No pretrained weights loaded"
echo "hpe_batching exit status: ${PIPESTATUS[0]}"
