#!/usr/bin/env bash
# Warm machine, after device_long.sh: recipe c (and a) again with seeds 1 and 2 on both long models, at once; the GPU check --quick beside.
set -u
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false PYTHONPATH=$PWD/src:/tmp/site
[ -d /tmp/site-old ] && export PYTHONPATH=$PWD/src:/tmp/site-old:/tmp/site
ls /tmp/g/models || exit 3
mkdir -p /tmp/s "$OUT/seeds"
PYTHONPATH=$PYTHONPATH:examples/language-modeling python3 - <<'PY' &
import sys, subprocess, threading
from pathlib import Path
import gpu_pretrain as g
sizes = g.Sizes()
procs = []
for m in ("small-long", "mini-long"):
    for seed in ("1", "2"):
        for r, n in (("c", 256),):
            out = Path(f"/tmp/s/{m}-{r}{n}-seed{seed}")
            step = g.finetune(sizes, Path(".gpu/corpus").resolve(), Path(f"/tmp/g/models/{m}"), out, "chinese_sentiment", n, r, 200)
            args = list(step.args); args[args.index("--seed") + 1] = seed
            log = open(f"/tmp/s/{out.name}.log", "w")
            procs.append(subprocess.Popen([sys.executable, str(step.script), *args], stdout=log, stderr=subprocess.STDOUT))
for p in procs:
    p.wait(timeout=200)
print("seeds done", [p.returncode for p in procs], flush=True)
PY
seeds=$!
timeout 170 bash benchmarks/gpu/check.sh --quick --out /tmp/check 2>&1 | tail -40
wait $seeds
for f in /tmp/s/*/all_results.json; do d=$(basename $(dirname $f)); cp $f "$OUT/seeds/$d.json"; python3 -c "import json;r=json.load(open('$f'));print('$d', r.get('eval_accuracy'), r.get('test_accuracy'), r.get('train_runtime'))"; done
cp /tmp/s/*.log "$OUT/seeds/" 2>/dev/null
tar czf "$OUT/check.tgz" -C /tmp check 2>/dev/null
ls /tmp/check 2>/dev/null
