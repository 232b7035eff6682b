"""Shared test setup: offline hub, tiny configs (hidden 32, 2 layers, 4 heads, vocab 99)."""

import contextlib
import logging
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Tests are grouped in folders; a test may import another folder's helpers by module name.
for _folder in sorted(Path(__file__).resolve().parent.iterdir()):
    if _folder.is_dir() and _folder.name not in ("fixtures", "transformers_suite", "__pycache__"):
        sys.path.append(str(_folder))

import pytest  # noqa: E402
import torch  # noqa: E402

import roformer_ext  # noqa: E402,F401  (registers the Auto classes)
import roformer_ext.attention_plan as plan_module  # noqa: E402
from roformer_ext import RoFormerExtConfig  # noqa: E402
from roformer_ext.encoding_knobs import knobs_class  # noqa: E402


def knob_kwargs(encoding: str, knobs: dict, overrides: dict) -> dict:
    """`overrides` as config keywords, the knobs `encoding` takes (given, or from `knobs`) joined in one dict."""
    overrides = dict(overrides)
    encoding = overrides.pop("position_encoding", encoding)
    names = knobs_class(encoding).names()
    given = {name: overrides.pop(name) for name in list(overrides) if name in names}
    params = {
        **{k: v for k, v in knobs.items() if k in names},
        **given,
        **overrides.pop("position_encoding_parameters", {}),
    }
    return {**overrides, "position_encoding": encoding, "position_encoding_parameters": params}


def tiny_config(**overrides) -> RoFormerExtConfig:
    """The smallest config that still has several heads, layers and both pair positions per head."""
    sizes = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return RoFormerExtConfig(**{**sizes, **no_dropout, "type_vocab_size": 2, **overrides})


#: What a position-sensitive model changes from the tiny config: weights large enough that attention is sharp (at 0.02
#: attention is nearly uniform and positions barely matter) and a small rope_theta (large angles between neighbours).
POSITION_SENSITIVE = {"initializer_range": 0.2, "rope_theta": 100.0}
#: How far a deliberate position error must move the outputs, in units of the test's tolerance.
SENSITIVITY_FACTOR = 100.0


def position_sensitive_config(config_class: type | None = None, **overrides):
    """`tiny_config` (or `config_class`) with POSITION_SENSITIVE: on the plain tiny config, positions x 7 move ~4e-4."""
    overrides = dict(overrides)
    rope = {"rope_theta": POSITION_SENSITIVE["rope_theta"], **(overrides.pop("rope_parameters", None) or {})}
    overrides.setdefault("initializer_range", POSITION_SENSITIVE["initializer_range"])
    if config_class is None:
        return tiny_config(rope_parameters=rope, **overrides)
    return config_class(rope_parameters=rope, **overrides)


def shifted_positions(position_ids: torch.Tensor) -> torch.Tensor:
    """Positions from 3 on one further (a relative error); restarts at 0 stay, so packed rows stay packed."""
    return position_ids + (position_ids >= 3).to(position_ids.dtype)


def scaled_positions(position_ids: torch.Tensor) -> torch.Tensor:
    """Every position doubled: the distances between tokens are wrong everywhere."""
    return position_ids * 2


@contextlib.contextmanager
def perturbed_positions(model: torch.nn.Module, perturb):
    """Within the block, the attention plan and the embeddings see `perturb(position_ids)`. Cached keys are numbered
    from the unperturbed queries, then perturbed: numbered from perturbed queries they would be consecutive again."""
    base = model.base_model
    attention_plan, embeddings_forward = base.attention_plan, base.embeddings.forward

    def perturbed_attention_plan(layout, embeddings, position_ids, *args, **kwargs):
        queries, key_positions = position_ids[0], plan_module.key_positions  # (batch, seq), unperturbed

        def perturbed_key_positions(query_positions, *key_args, **key_kwargs):
            return perturb(key_positions(queries, *key_args, **key_kwargs))

        plan_module.key_positions = perturbed_key_positions  # read by make_attention_plan during this call
        try:
            return attention_plan(layout, embeddings, perturb(position_ids), *args, **kwargs)
        finally:
            plan_module.key_positions = key_positions

    def perturbed_embeddings(
        input_ids=None, token_type_ids=None, inputs_embeds=None, position_encoding=None, position_ids=None
    ):
        moved = None if position_ids is None else perturb(position_ids)
        return embeddings_forward(input_ids, token_type_ids, inputs_embeds, position_encoding, moved)

    base.attention_plan = perturbed_attention_plan
    base.embeddings.forward = perturbed_embeddings
    try:
        yield
    finally:
        del base.attention_plan
        del base.embeddings.forward


def float_outputs(output) -> torch.Tensor:
    """Every floating-point tensor of a model output (or a tensor), flattened into one: all of a head's outputs."""
    if isinstance(output, torch.Tensor):
        return output.detach().float().flatten()
    values = output.values() if hasattr(output, "values") else output
    tensors = [t.detach().float().flatten() for t in values if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return torch.cat(tensors)


def assert_position_sensitive(model: torch.nn.Module, run, tolerance: float) -> dict[str, float]:
    """`run(model)` (anything returning outputs) moves by >= SENSITIVITY_FACTOR x `tolerance` when positions are shifted
    or scaled, so a test comparing two paths at `tolerance` sees a position error. Returns the changes / tolerance."""
    with torch.no_grad():
        reference = float_outputs(run(model))
        margins = {}
        for name, perturb in (("shifted", shifted_positions), ("scaled", scaled_positions)):
            with perturbed_positions(model, perturb):
                moved = float_outputs(run(model))
            margins[name] = (moved - reference).abs().max().item() / tolerance
    weakest = min(margins.values())
    assert weakest >= SENSITIVITY_FACTOR, (
        f"this model barely depends on positions: a position error moves its outputs by only {weakest:.3g} x the "
        f"tolerance {tolerance} (margins {margins}); build it from position_sensitive_config()"
    )
    return margins


@pytest.fixture(autouse=True, scope="module")
def _fresh_dynamo():
    """Compiled entries collected across modules could push a `fullgraph=True` test over dynamo's recompile limit."""
    torch._dynamo.reset()
    yield


@pytest.fixture
def config() -> RoFormerExtConfig:
    return tiny_config()


def random_inputs(batch: int = 3, seq: int = 11, vocab: int = 99, seed: int = 0, pad_last: bool = True):
    """input_ids, attention_mask (rows right-padded by different amounts), token_type_ids."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab, (batch, seq), generator=generator)
    attention_mask = torch.ones(batch, seq, dtype=torch.long)
    if pad_last:
        for row in range(1, batch):
            attention_mask[row, seq - 2 * row :] = 0
    input_ids = input_ids.masked_fill(attention_mask == 0, 0)
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, seq // 2 :] = 1
    return input_ids, attention_mask, token_type_ids


@pytest.fixture
def processors_for_text_config():
    """The Auto processor classes map the *text* config to ours for one test only (else every later one would)."""
    from transformers import AutoImageProcessor, AutoProcessor
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING

    from roformer_ext import RoFormerExtImageProcessor, RoFormerExtProcessor

    AutoImageProcessor.register(
        RoFormerExtConfig, image_processor_classes={"pil": RoFormerExtImageProcessor}, exist_ok=True
    )
    AutoProcessor.register(RoFormerExtConfig, RoFormerExtProcessor, exist_ok=True)
    yield
    IMAGE_PROCESSOR_MAPPING._extra_content.pop(RoFormerExtConfig, None)
    PROCESSOR_MAPPING._extra_content.pop(RoFormerExtConfig, None)


#: What transformers says when a name we use is on its way out (logged, not raised, so pytest's filters miss it).
_DEPRECATION_WORDS = ("deprecat", "will be removed", "renamed")


class _DeprecationRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if any(word in message.lower() for word in _DEPRECATION_WORDS):
            self.messages.append(message)


@pytest.fixture(autouse=True)
def _no_transformers_deprecations():
    """A test whose code path logs a transformers deprecation (once-only cache cleared) fails: renames turn CI red."""
    logging.Logger.warning_once.cache_clear()
    handler = _DeprecationRecords()
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
    if handler.messages:
        pytest.fail("transformers logged a deprecation on this test's code path:\n" + "\n".join(handler.messages))


@pytest.fixture(autouse=True)
def _autograd_stays_enabled():
    """A test that leaves autograd off breaks every later training test in the worker: fail that test instead."""
    yield
    if not torch.is_grad_enabled():
        torch.set_grad_enabled(True)
        pytest.fail("This test left autograd disabled (torch.set_grad_enabled(False)); use `with torch.no_grad():`.")
