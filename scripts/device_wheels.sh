#!/usr/bin/env bash
# Download the wheels a GPU device machine lacks (its image has torch, timm, peft, pluggy,
# click, jinja2, pyarrow, scipy, scikit-learn, safetensors, but not open_clip) into .whl/,
# for the device tool's `carry`. Run here, in the repository root, where pip can reach the
# package index:   bash scripts/device_wheels.sh
# Then, on the device:  carry [".whl"], command starting with
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit;
set -euo pipefail
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
# Pure-Python wheels, the versions this repository is tested with.
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux2014_x86_64 -d .whl \
  open_clip_torch==3.3.0 ftfy==6.3.1 wcwidth==0.9.4
ls -l .whl
