#!/usr/bin/env bash
# The GPU check (docs/benchmarks.md#gpu): packed rows (torch's varlen kernel, flex, flash-attention varlen) against
# padding, ours against ModernBERT, bf16 training and generation, transformers' RoFormer vs
# ours on the device, run_mlm.py at base size. All logic is in check.py. Beside the working tree it needs only the
# wheels fetch_wheels.sh fetches (it fails if tree + wheels pass the GPU machine's 64 MiB).
#
#   bash benchmarks/gpu/check.sh --quick                 # at most 3 minutes on one H100 / H200
#   bash benchmarks/gpu/check.sh [--out DIR]              # at most 8 minutes (default DIR: benchmarks/results/gpu/<date>)
#   bash benchmarks/gpu/check.sh --dry-run --out DIR      # on CPU at tiny sizes: the script's own check (CI runs it)
#   bash benchmarks/gpu/check.sh --wheels .whl ...        # first install the carried wheels (fetch_wheels.sh) to a temp dir
#
# Installs nothing from outside: the working tree's src/ (PYTHONPATH, no pip install), the machine's own torch, and
# only with --wheels the wheels the tree carries (pip --no-index). Exit status: check.py's (1 if any stage failed).
set -euo pipefail
cd "$(dirname "$0")/../.."
python="${PYTHON:-python3}"
out="benchmarks/results/gpu/$(date -u +%Y-%m-%d)"
wheels=""
args=()
while (($#)); do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --wheels) wheels="$2"; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if [[ -n "$wheels" ]]; then
    site="$(mktemp -d)"
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl
    export PYTHONPATH="$PWD/src:$site${PYTHONPATH#"$PWD/src"}"
fi
exec "$python" benchmarks/gpu/check.py --out "$out" "${args[@]}"
