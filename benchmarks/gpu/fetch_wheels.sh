#!/usr/bin/env bash
# The Python packages the GPU check needs beyond a GPU image's torch, as wheels in .whl/ (gitignored), for a machine
# that reaches no package registry: run this where pip works, carry .whl with the tree, then
#   bash benchmarks/gpu/check.sh --wheels .whl ...
# (pip --no-index into a temp folder; nothing installed system-wide). About 15 MB:
# - transformers in the range roformer-ext supports (an older image release stops roformer_ext at import);
# - datasets with dill and multiprocess (run_mlm.py; the rest of datasets' needs are on the usual GPU images).
# Nothing else: torch comes with the GPU image (its varlen flash kernel and flex attention are torch's own; ModernBERT
# is transformers'). flash-attn is not here: its wheels are built per torch / CUDA / Python and weigh hundreds of MB;
# without it the flash-attention parts of the check are skipped with that reason.
# The GPU machine takes the working tree plus at most 64 MiB in all, wheels included: the last step adds up what
# travels (tracked and untracked-but-not-ignored files, and .whl) and fails above 64 MiB.
# Target: Python 3.12 on x86-64 Linux (PY_VERSION to change it).
set -euo pipefail
cd "$(dirname "$0")/../.."
python="${PYTHON:-python3}"
range=$(PYTHONPATH=src "$python" -c "from roformer_ext.compat import SUPPORTED_RANGE; print(SUPPORTED_RANGE)")
"$python" -m pip download --no-deps --only-binary=:all: --python-version "${PY_VERSION:-3.12}" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    "$range" "datasets>=4" "dill<0.4.2" "multiprocess<0.70.20"
ls -l .whl
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s}')
wheels=$(du -cb .whl/*.whl | tail -1 | cut -f1)
awk -v t="$tree" -v w="$wheels" 'BEGIN {
    printf "beside the working tree (%.1f MiB): .whl %.1f MiB; in all %.1f MiB of 64\n", t / 2^20, w / 2^20, (t + w) / 2^20
    exit (t + w > 64 * 2^20) }' || { echo "over the GPU machine's 64 MiB: drop wheels or shrink the tree" >&2; exit 1; }
