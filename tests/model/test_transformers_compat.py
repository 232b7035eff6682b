"""Current with transformers: the tested range, the self-check outside it, silence, both cache names."""

import configparser
import contextlib
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from unittest.mock import Mock

import pytest
import torch
import transformers
from conftest import _DeprecationRecords, assert_position_sensitive, position_sensitive_config, tiny_config
from transformers import DynamicCache

import roformer_ext.self_check as checking
from roformer_ext import RoFormerExtForCausalLM, RoFormerExtModel
from roformer_ext.compat import (
    CACHE,
    LOWEST_TORCH,
    LOWEST_TRANSFORMERS,
    SUPPORTED_RANGE,
    TRANSFORMERS_BELOW,
    IncompatibleTransformersError,
    check_transformers_version,
    is_tested_release,
    output_cache,
)
from roformer_ext.self_check import self_check

ROOT = Path(__file__).resolve().parents[2]


def test_declared_range_is_the_tested_range():
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    requirements = [line.strip() for line in parser["options"]["install_requires"].splitlines() if line.strip()]
    assert f"transformers>={LOWEST_TRANSFORMERS},<{TRANSFORMERS_BELOW}" in requirements
    assert f"torch>={LOWEST_TORCH}" in requirements
    assert SUPPORTED_RANGE in (ROOT / "README.md").read_text()
    assert SUPPORTED_RANGE in (ROOT / "docs" / "compatibility.md").read_text()


def test_installed_release_is_tested_and_passes_the_self_check():
    assert check_transformers_version() and self_check(RoFormerExtForCausalLM) == []


@pytest.mark.parametrize(
    "version, tested",
    [*((v, True) for v in ("5.21.0", "5.22.2", "5.24.0", "5.25.0", "5.25.3")),
     *((v, False) for v in ("5.20.2", "5.21.0rc1", "5.26.0", "5.26.0.dev0", "5.26.0rc1", "6.0.0", "4.57.6"))],
)  # fmt: skip
def test_tested_range(version, tested):
    """The next minor's pre-releases are outside too (5.26.0.dev0 < 5.26.0 as a version, not as a release)."""
    assert is_tested_release(version) == tested


@pytest.fixture
def untested_release(monkeypatch):
    """A release outside the tested range, self-check not run yet (patched on the module object self_check.py holds)."""
    monkeypatch.setattr(checking, "_policy", {"tested": None, "warned": True, "failure": None, "checker": None})
    monkeypatch.setattr(checking.transformers, "__version__", "5.99.0")
    torch.compiler.reset()  # a graph traced before holds the check's result of its own time
    yield checking
    torch.compiler.reset()


def test_failed_self_check_stops_every_forward(untested_release, monkeypatch):
    broken = Mock(side_effect=AssertionError("generate passed the cache as ['kv_cache']"))
    monkeypatch.setattr(untested_release, "_SELF_CHECKS", (("cached generation", broken),))
    model = RoFormerExtForCausalLM(tiny_config())  # built fine: checked at forward
    with pytest.raises(IncompatibleTransformersError, match="self-check failed"):  # run while the first is traced
        torch.compile(RoFormerExtModel(tiny_config()).eval(), backend="eager")(torch.tensor([[5, 6, 7]]))
    for _ in range(2):
        with pytest.raises(IncompatibleTransformersError, match=r"self-check failed under transformers 5\.99\.0"):
            model(torch.tensor([[5, 6, 7]]))


def test_self_check_leaves_every_random_generator_as_it_was(untested_release, monkeypatch):
    """No seed reaches any device (`torch.manual_seed` seeds CUDA, MPS and XPU too), and the CPU stream goes on."""
    model = RoFormerExtModel(tiny_config())
    seeded = []
    for module in (torch.cuda, torch.mps, torch.xpu):
        for name in ("manual_seed", "manual_seed_all"):
            where = f"{module.__name__}.{name}"
            monkeypatch.setattr(module, name, lambda seed, where=where: seeded.append(where), raising=False)
    state = torch.get_rng_state()
    model(torch.tensor([[5, 6, 7]]))
    assert seeded == [] and torch.equal(torch.get_rng_state(), state)


@contextlib.contextmanager
def _default(setter, value, restore):
    setter(value)
    try:
        yield
    finally:
        setter(restore)


@pytest.mark.parametrize("context", ["meta", "default meta", "fake tensors", "default bfloat16"])
def test_self_check_runs_apart_from_the_callers_context(untested_release, context):
    """A first forward on meta, fake tensors or another default dtype: the check runs on CPU tensors of its own."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    model = RoFormerExtModel(tiny_config())
    with {
        "meta": lambda: torch.device("meta"),
        "default meta": lambda: _default(torch.set_default_device, "meta", None),
        "fake tensors": lambda: FakeTensorMode(allow_non_fake_inputs=True),
        "default bfloat16": lambda: _default(torch.set_default_dtype, torch.bfloat16, torch.float32),
    }[context]():
        (RoFormerExtModel(tiny_config()) if "meta" in context else model)(torch.tensor([[5, 6, 7]]))
    RoFormerExtModel(tiny_config())(torch.tensor([[5, 6, 7]]))


def test_passed_self_check_runs_once_before_the_first_compiled_forward(untested_release, monkeypatch):
    """While the first compiled forward is traced (fullgraph); never again in this process."""
    calls = []
    monkeypatch.setattr(untested_release, "_SELF_CHECKS", (("counted", calls.append),))
    model = RoFormerExtModel(tiny_config()).eval()
    input_ids = torch.tensor([[5, 6, 7]])
    compiled = torch.compile(model, backend="eager", fullgraph=True)(input_ids).last_hidden_state
    assert len(calls) == 1 and isinstance(calls[0], RoFormerExtForCausalLM)
    RoFormerExtForCausalLM(tiny_config())(input_ids)
    torch.testing.assert_close(compiled, model(input_ids).last_hidden_state)
    assert len(calls) == 1


#: A user's machine: only the folder's code, a release outside the range (argv[3] "rename": its generate passes the
#: cache as `kv_cache`). Prints our warnings and the generated ids.
FUTURE_RELEASE = textwrap.dedent(
    """
    import json, sys, warnings
    sys.modules["roformer_ext"] = None  # only the folder's code files
    import torch, transformers
    from transformers import AutoImageProcessor  # (importing it once replaces the module in sys.modules)
    sys.modules["transformers"].__version__ = transformers.__version__ = sys.argv[2]
    if sys.argv[3] == "rename":
        from transformers.generation.utils import GenerationMixin
        prepare = GenerationMixin.prepare_inputs_for_generation
        def renamed(self, *args, **kwargs):
            inputs = prepare(self, *args, **kwargs)
            for old in ("cache", "past_key_values"):
                if old in inputs:
                    inputs["kv_cache"] = inputs.pop(old)
            return inputs
        GenerationMixin.prepare_inputs_for_generation = renamed
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
        again = transformers.AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True)
        ids = model.generate(torch.tensor([[5, 6, 7, 8]]), max_new_tokens=6, do_sample=False, pad_token_id=0)
    ours = [str(w.message) for w in caught if "roformer-ext" in str(w.message)]
    print(json.dumps({"warnings": ours, "ids": ids.tolist()}))
    """
)


@pytest.mark.parametrize("mode", ["same", "rename"])
def test_saved_folder_under_a_future_release(tmp_path, mode):
    """Nothing renamed: loads, warns once, generates correctly. Cache renamed: the self-check stops it, naming the fix."""
    torch.manual_seed(0)
    model = RoFormerExtForCausalLM(tiny_config(initializer_range=0.5)).eval()
    model.save_pretrained(tmp_path / "folder")
    expected = model.generate(torch.tensor([[5, 6, 7, 8]]), max_new_tokens=6, do_sample=False, pad_token_id=0)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    command = [sys.executable, "-c", FUTURE_RELEASE, str(tmp_path / "folder"), "5.31.0", mode]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    if mode == "same":
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["ids"] == expected.tolist()
        assert len(result["warnings"]) == 1 and SUPPORTED_RANGE in result["warnings"][0]
    else:
        last_line = done.stderr.strip().splitlines()[-1]
        assert done.returncode != 0 and "IncompatibleTransformersError" in last_line
        assert "self-check failed under transformers 5.31.0" in last_line and "kv_cache" in last_line
        assert "update-code" in last_line and "push-code" in last_line


@pytest.mark.parametrize("command", [["-c", "import roformer_ext"], ["-m", "roformer_ext.conversion", "--help"]])
def test_import_and_cli_help_are_silent(command):
    """No docstring-checker errors, no warnings (a fresh interpreter; the one warning outside the range ignored)."""
    filters = ["-W", "default", "-W", "ignore:roformer-ext was tested on"]
    done = subprocess.run([sys.executable, *filters, *command], capture_output=True, text=True, cwd=ROOT.parent)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "[ERROR]" not in done.stdout and (done.stdout == "") == (command[0] == "-c")


@pytest.mark.parametrize("model_class", [RoFormerExtForCausalLM, RoFormerExtModel])
def test_cache_under_either_name_gives_the_same_step(model_class):
    """`cache` everywhere; `past_key_values` too: silent before the rename, transformers' FutureWarning after."""
    torch.manual_seed(0)
    model = model_class(position_sensitive_config(is_decoder=True)).eval()
    input_ids = torch.randint(5, 99, (2, 9))
    with torch.no_grad():
        full = model(input_ids)[0][:, -1]
        for name in ("cache", "past_key_values"):
            prefix = output_cache(model(input_ids[:, :-1], use_cache=True))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                step = model(input_ids[:, -1:], **{name: prefix})[0][:, -1]
            torch.testing.assert_close(step, full, rtol=1e-5, atol=1e-5)
            renamed = name == "past_key_values" and CACHE == "cache"
            deprecations = [w for w in caught if "`past_key_values` is deprecated" in str(w.message)]
            assert len(deprecations) == int(renamed) and all(w.category is FutureWarning for w in deprecations)
    cached_step = lambda m: m(input_ids[:, -1:], cache=output_cache(m(input_ids[:, :-1], use_cache=True)))[0][:, -1]  # noqa: E731
    assert_position_sensitive(model, cached_step, 1e-5)


def test_old_name_beside_the_new_one_is_not_silently_ignored():
    torch.manual_seed(0)
    model = RoFormerExtForCausalLM(position_sensitive_config()).eval()
    first = output_cache(model(torch.randint(5, 99, (1, 4)), use_cache=True))
    if CACHE == "cache":  # transformers' rule where it renamed: the new name wins, with a warning
        with pytest.warns(FutureWarning, match="Both `past_key_values` and `cache` are set"):
            model(torch.randint(5, 99, (1, 1)), cache=first, past_key_values=DynamicCache())
    else:
        with pytest.raises(ValueError, match="Pass the KV cache once"):
            model(torch.randint(5, 99, (1, 1)), cache=first, past_key_values=DynamicCache())


def test_left_padded_batch_and_static_cache_generate():
    """Each left-padded row generates what its prompt alone does, tokens and logits, with a dynamic or static cache."""
    torch.manual_seed(0)
    model = RoFormerExtForCausalLM(position_sensitive_config()).eval()
    prompts = [torch.randint(5, 99, (1, 7)), torch.randint(5, 99, (1, 4))]
    input_ids = torch.cat([torch.nn.functional.pad(prompt, (7 - prompt.shape[1], 0)) for prompt in prompts])
    attention_mask = (torch.arange(7) >= torch.tensor([[0], [3]])).long()
    settings = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, return_dict_in_generate=True, output_logits=True)
    batch = model.generate(input_ids, attention_mask=attention_mask, **settings)
    static = model.generate(input_ids, attention_mask=attention_mask, cache_implementation="static", **settings)
    assert torch.equal(static.sequences, batch.sequences)
    logits = torch.stack(batch.logits)
    torch.testing.assert_close(torch.stack(static.logits), logits, rtol=1e-5, atol=1e-5)
    for row, prompt in enumerate(prompts):
        alone = model.generate(prompt, **settings)
        assert torch.equal(batch.sequences[row, 7:], alone.sequences[0, prompt.shape[1] :])
        torch.testing.assert_close(logits[:, row], torch.stack(alone.logits)[:, 0], rtol=1e-5, atol=1e-5)
    run = lambda m: torch.stack(m.generate(input_ids, attention_mask=attention_mask, **settings).logits)  # noqa: E731
    assert_position_sensitive(model, run, 1e-5)


def test_deprecation_guard_catches_a_logged_rename():
    handler = _DeprecationRecords()
    logger = transformers.utils.logging.get_logger("transformers.some_module")
    logger.addHandler(handler)
    logger.propagate = False  # kept from this test's own guard, which would fail it
    try:
        logger.warning("`old_name` is deprecated and will be removed in v9. Use `new_name` instead.")
        logger.warning("an unrelated warning")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    assert handler.messages == ["`old_name` is deprecated and will be removed in v9. Use `new_name` instead."]
