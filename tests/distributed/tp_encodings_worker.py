"""`torchrun --nproc_per_node 2 tp_encodings_worker.py RESULTS FOLDER...`: tensor parallel against whole, per folder."""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import AutoConfig, DistributedConfig

from roformer_ext import RoFormerExtForMaskedLM, RoFormerExtVisionTextConfig, RoFormerExtVisionTextForMaskedLM


def check(folder: str) -> dict:
    vision = isinstance(AutoConfig.from_pretrained(folder), RoFormerExtVisionTextConfig)
    cls = RoFormerExtVisionTextForMaskedLM if vision else RoFormerExtForMaskedLM
    model = cls.from_pretrained(folder, distributed_config=DistributedConfig(tp_size=2)).eval()
    reference = cls.from_pretrained(folder).eval()
    if (Path(folder) / "inputs.pt").is_file():  # a vision-text batch the test wrote
        inputs = torch.load(Path(folder) / "inputs.pt")
    else:
        generator = torch.Generator().manual_seed(0)
        inputs = {"input_ids": torch.randint(5, model.config.vocab_size, (2, 48), generator=generator)}
    result = {"local_heads": model.config.num_attention_heads // 2}
    with torch.no_grad():
        expected = reference(**inputs).logits
        try:
            result["max_abs_diff"] = (model(**inputs).logits - expected).abs().max().item()
        except ValueError as err:
            result["error"] = str(err)
    return result


def main() -> None:
    dist.init_process_group("gloo")
    results = {folder: check(folder) for folder in sys.argv[2:]}
    if dist.get_rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(results, f, indent=2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
