#!/usr/bin/env bash
# The Python packages the GPU check needs beyond a GPU image's torch, as wheels in .whl/ (gitignored), for a machine
# that reaches no package registry: run this where pip works, carry .whl with the tree, then
#   bash benchmarks/gpu/check.sh --wheels .whl ...
# (pip --no-index into a temp folder; nothing installed system-wide). About 15 MB:
# - transformers in the range roformer-ext supports (an older image release stops roformer_ext at import);
# - datasets with dill and multiprocess (run_mlm.py; the rest of datasets' needs are on the usual GPU images);
# - liger-kernel (the fused rotary kernel; pure Python over Triton).
# flash-attn is not here: its wheels are built per torch / CUDA / Python and weigh hundreds of MB; without it the
# flash-attention parts of the check are skipped with that reason.
# Target: Python 3.12 on x86-64 Linux (PY_VERSION to change it).
set -euo pipefail
cd "$(dirname "$0")/../.."
python="${PYTHON:-python3}"
range=$(PYTHONPATH=src "$python" -c "from roformer_ext.compat import SUPPORTED_RANGE; print(SUPPORTED_RANGE)")
"$python" -m pip download --no-deps --only-binary=:all: --python-version "${PY_VERSION:-3.12}" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    "$range" "datasets>=4" "dill<0.4.2" "multiprocess<0.70.20" liger-kernel
ls -l .whl
