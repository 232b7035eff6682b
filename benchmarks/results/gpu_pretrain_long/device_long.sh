#!/usr/bin/env bash
# On the lent GPU (no network): install the carried wheels, run gpu_pretrain.py --plan long, pack what comes back.
set -u
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
rm -rf /tmp/g /tmp/g-extra /tmp/site /tmp/site-old
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/whl/*.whl || exit 2
export PYTHONPATH=$PWD/src:/tmp/site
if ! python3 -c "import datasets" ; then
  echo "datasets 4.5 does not import here: the older wheels"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site-old .gpu/whl-old/*.whl || exit 2
  export PYTHONPATH=$PWD/src:/tmp/site-old:/tmp/site
fi
nvidia-smi -L; nproc
python3 -c "import torch, transformers, datasets, pyarrow, roformer_ext; print('torch', torch.__version__, 'transformers', transformers.__version__, 'datasets', datasets.__version__, 'pyarrow', pyarrow.__version__, 'cuda', torch.cuda.is_available())" || exit 3
mkdir -p /tmp/g-extra
nvidia-smi dmon -s um -d 5 > /tmp/g-extra/dmon.txt 2>&1 &
dmon=$!
budget=$((585 - SECONDS - 35))
echo "budget: $budget s"
python3 examples/language-modeling/gpu_pretrain.py --plan long --data .gpu/corpus --out /tmp/g --budget "$budget" --steps "small=${SMALL_STEPS:-11000},mini=${MINI_STEPS:-12000}" 2>&1 | tee "$OUT/run.log"
rc=${PIPESTATUS[0]}
kill $dmon 2>/dev/null
mkdir -p /tmp/g
cp -r /tmp/g-extra/* /tmp/g/ 2>/dev/null
cd /tmp/g || exit 4
tar czf "$OUT/results.tgz" --exclude='.cache-*' $(ls -d summary.json summary.md dmon.txt logs 2>/dev/null) $(ls -d models/*/trainer_state.json models/*/all_results.json models/*/config.json finetune/*/all_results.json finetune/*/trainer_state.json 2>/dev/null)
for m in small-long mini-long; do
  [ -f "models/$m/model.safetensors" ] && tar cf - --exclude='*.py' --exclude='checkpoint-*' "models/$m" | split -b 15M - "$OUT/$m.tar.part-"
done
ls -la "$OUT"
exit "$rc"
