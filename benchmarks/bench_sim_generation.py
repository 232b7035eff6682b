"""RoFormer-Sim similar-sentence generation: 50 sampled candidates of up to 32 tokens for one source, three ways.

- **ours**: `RoFormerExtForCausalLM` with `decoder_attention="unilm"`, one `generate()` call with
  `num_return_sequences=50` (batched, KV cache, UniLM mask: source bidirectional, target causal);
- **hand loop**: what the README used to show and users post: per candidate (batch 1), per token, re-run the
  masked-LM model on the whole sequence under `unilm_attention_mask`, no cache, and sample the last position;
- **transformers RoFormerForCausalLM** (`is_decoder=True`, the recipe posted in junnyu's issues): its own
  `generate()`, one call per candidate as posted, and one batched call with `num_return_sequences=50`.

All share one set of random weights (a transformers `RoFormerForCausalLM` converted by our converter, so ours holds
the same tensors); the weights are random, so the text is meaningless and every candidate runs the full length
(no [SEP] is configured). Sampling is nucleus sampling (top_p 0.95, no top-k) everywhere. Each way is timed as the
median of `--repeats` runs, interleaved; the hand loop is timed on `--hand-loop-candidates` candidates and scaled
to `--candidates` (each candidate is an independent batch-1 loop of the same length, so its time is linear in
their number), which keeps a base-size run short on a shared machine.

    python benchmarks/bench_sim_generation.py --size base --out benchmarks/results
"""

import argparse
import copy
import sys
import tempfile
from collections.abc import Callable

import torch
from bench_utils import interleaved_medians, load_average, machine_info, machine_markdown, markdown_table, write_results
from transformers import RoFormerConfig, RoFormerForCausalLM

from roformer_ext import RoFormerExtForCausalLM, RoFormerExtForMaskedLM
from roformer_ext.conversion.from_transformers import build_converted_model
from roformer_ext.masking_roformer_ext import unilm_attention_mask

SIZES = {
    # hidden, layers, heads, intermediate, vocab (12000: about RoFormer-Sim's char vocabulary, 12,000 entries)
    "tiny": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37,
             "vocab_size": 99},
    "base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
             "vocab_size": 12000},
}  # fmt: skip
CLS, SEP, PAD = 2, 3, 0
SAMPLING = {"do_sample": True, "top_p": 0.95, "top_k": 0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="base")
    parser.add_argument("--candidates", type=int, default=50, help="similar sentences sampled for the source")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens generated per candidate")
    parser.add_argument("--source-length", type=int, default=16, help="source tokens, [CLS] and [SEP] included")
    parser.add_argument("--hand-loop-candidates", type=int, default=5, help="candidates the hand loop really runs")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="folder for bench_sim_generation.json / .md (default: print only)")
    return parser.parse_args(argv)


def build_models(size: str, seed: int) -> tuple[RoFormerForCausalLM, RoFormerExtForCausalLM, RoFormerExtForMaskedLM]:
    """transformers' causal LM with random weights; ours (UniLM generator and MLM model) converted from it."""
    torch.manual_seed(seed)
    config = RoFormerConfig(**SIZES[size], is_decoder=True, max_position_embeddings=512, pad_token_id=PAD)
    theirs = RoFormerForCausalLM(config).eval()
    with tempfile.TemporaryDirectory() as folder:
        theirs.save_pretrained(folder)
        ours = build_converted_model(folder)  # RoFormerExtForCausalLM, weights renamed by our key map
    ours.config.decoder_attention = "unilm"
    mlm = RoFormerExtForMaskedLM(_encoder_config(ours))
    missing, unexpected = mlm.load_state_dict(ours.state_dict(), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.decoder.weight"}, (missing, unexpected)
    mlm.tie_weights()
    return theirs, ours.eval(), mlm.eval()


def _encoder_config(model: RoFormerExtForCausalLM):
    config = copy.deepcopy(model.config)
    config.is_decoder = False
    return config


def top_p_sample(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus sampling of one token per row (what the hand loop does by hand)."""
    probs = logits.softmax(-1)
    sorted_probs, order = probs.sort(descending=True)
    outside = sorted_probs.cumsum(-1) - sorted_probs > top_p  # tokens after the nucleus is complete
    sorted_probs = sorted_probs.masked_fill(outside, 0.0)
    return order.gather(-1, torch.multinomial(sorted_probs, 1))


def hand_loop(mlm: RoFormerExtForMaskedLM, source: torch.Tensor, candidates: int, new_tokens: int) -> list[list[int]]:
    """Per candidate, per token: the whole sequence through the MLM model under the UniLM mask, no cache."""
    results = []
    for _ in range(candidates):
        input_ids, token_type_ids = source, torch.zeros_like(source)
        for _ in range(new_tokens):
            mask = unilm_attention_mask(token_type_ids, torch.ones_like(input_ids))
            logits = mlm(input_ids, attention_mask=mask, token_type_ids=token_type_ids).logits[:, -1]
            next_id = top_p_sample(logits, SAMPLING["top_p"])
            input_ids = torch.cat([input_ids, next_id], dim=1)
            token_type_ids = torch.cat([token_type_ids, torch.ones_like(next_id)], dim=1)
        results.append(input_ids[0, source.shape[1] :].tolist())
    return results


def main(argv: list[str] | None = None) -> dict:
    with torch.no_grad():  # a context, not set_grad_enabled(False): a caller in the same process keeps its autograd
        return run(parse_args(argv), sys.argv[1:] if argv is None else argv)


def run(args: argparse.Namespace, argv: list[str]) -> dict:
    theirs, ours, mlm = build_models(args.size, args.seed)
    generator = torch.Generator().manual_seed(args.seed + 1)
    source = torch.randint(5, SIZES[args.size]["vocab_size"], (1, args.source_length), generator=generator)
    source[0, 0], source[0, -1] = CLS, SEP
    inputs = {
        "input_ids": source,
        "attention_mask": torch.ones_like(source),
        "token_type_ids": torch.zeros_like(source),
    }
    length = {"max_new_tokens": args.new_tokens, "min_new_tokens": args.new_tokens, "pad_token_id": PAD}
    n = args.candidates

    def ours_batched() -> torch.Tensor:
        return ours.generate(**inputs, **SAMPLING, **length, num_return_sequences=n)

    def theirs_batched() -> torch.Tensor:
        return theirs.generate(**inputs, **SAMPLING, **length, num_return_sequences=n)

    def theirs_one_by_one() -> list[torch.Tensor]:
        return [theirs.generate(**inputs, **SAMPLING, **length) for _ in range(n)]

    def hand() -> list[list[int]]:
        return hand_loop(mlm, source, args.hand_loop_candidates, args.new_tokens)

    shapes = {"ours": tuple(ours_batched().shape), "theirs": tuple(theirs_batched().shape)}
    expected = (n, args.source_length + args.new_tokens)
    assert shapes == {"ours": expected, "theirs": expected}, shapes
    assert all(len(row) == args.new_tokens for row in hand())

    load_before = load_average()
    fns: dict[str, Callable[[], object]] = {
        "ours": ours_batched,
        "hand": hand,
        "theirs_one_by_one": theirs_one_by_one,
        "theirs_batched": theirs_batched,
    }
    seconds = interleaved_medians(fns, args.repeats, warmup=0)
    seconds["hand"] = seconds["hand"] * n / args.hand_loop_candidates  # linear in the candidates, see above
    load_after = load_average()

    names = {
        "ours": "ours: generate(), batched, KV cache, UniLM",
        "hand": "hand loop: MLM + unilm_attention_mask, recompute per token, batch 1",
        "theirs_one_by_one": "transformers RoFormerForCausalLM: generate() per candidate",
        "theirs_batched": "transformers RoFormerForCausalLM: generate(), batched",
    }
    rows = [
        {"implementation": names[key], "seconds": seconds[key], "vs_ours": seconds[key] / seconds["ours"]}
        for key in ("ours", "hand", "theirs_one_by_one", "theirs_batched")
    ]
    info = machine_info("bench_sim_generation.py", argv)
    payload = {
        "size": args.size, "model": SIZES[args.size], "candidates": n, "new_tokens": args.new_tokens,
        "source_length": args.source_length, "hand_loop_candidates_run": args.hand_loop_candidates,
        "repeats": args.repeats, "sampling": SAMPLING, "results": rows, "machine": info,
        "load_average_before": load_before, "load_average_after": load_after,
    }  # fmt: skip
    table = markdown_table(
        ["implementation", f"seconds for {n} candidates", "time vs ours"],
        [[r["implementation"], r["seconds"], f"{r['vs_ours']:.1f}×"] for r in rows],
    )
    markdown = (
        f"### {n} similar sentences of {args.new_tokens} tokens, one {args.source_length}-token source, "
        f"{args.size} size (random weights: {SIZES[args.size]})\n\n{table}\n\n"
        f"Hand loop run on {args.hand_loop_candidates} candidates and scaled to {n}. "
        + machine_markdown(info, load_before, load_after)
    )
    print(markdown)
    if args.out:
        write_results(args.out, "bench_sim_generation", payload, markdown)
    return payload


if __name__ == "__main__":
    main()
