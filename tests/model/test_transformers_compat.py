"""Current with transformers: one compat module, the tested range and the self-check outside it, silence, both cache
names.

CI runs this file (with the model, generation, Sim, packing, conversion and remote-code tests) on the lowest release
setup.cfg declares and the whole suite on the newest, so each test here is checked on both sides of a rename.
The decoders of the cached / recomputed / left-padded comparisons come from `position_sensitive_config`, and each
comparison asserts that a position error would move its outputs ≥ 100x its tolerance (`assert_position_sensitive`).
"""

import configparser
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

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
    """setup.cfg's install_requires, compat's range and the README say the same range; torch's floor too."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    requirements = [line.strip() for line in parser["options"]["install_requires"].splitlines() if line.strip()]
    assert f"transformers>={LOWEST_TRANSFORMERS},<{TRANSFORMERS_BELOW}" in requirements
    assert f"torch>={LOWEST_TORCH}" in requirements
    assert SUPPORTED_RANGE in (ROOT / "README.md").read_text()
    assert SUPPORTED_RANGE in (ROOT / "docs" / "compatibility.md").read_text()


def test_installed_release_is_inside_the_range():
    assert check_transformers_version()  # CI runs the suite on both ends of the range


@pytest.mark.parametrize("version", ["5.21.0", "5.22.2", "5.24.0", "5.25.0", "5.25.3"])
def test_tested_releases(version):
    assert is_tested_release(version)


@pytest.mark.parametrize(
    "version", ["5.20.2", "5.21.0rc1", "5.26.0", "5.26.0.dev0", "5.26.0rc1", "5.27.1", "6.0.0", "4.57.6"]
)
def test_releases_outside_the_range_are_untested(version):
    """Pre-releases of the next minor are outside too (5.26.0.dev0 < 5.26.0 as a version, not as a release)."""
    assert not is_tested_release(version)


def test_self_check_passes_on_the_installed_release():
    assert self_check(RoFormerExtForCausalLM) == []


@pytest.fixture
def untested_release(monkeypatch):
    """A transformers release outside the tested range, whose self-check has not run in this process yet.
    (`checking.transformers`: the module object self_check.py imported; transformers replaces its entry in sys.modules
    when its image-processor Auto class is first imported.)"""
    monkeypatch.setattr(checking, "_policy", {"tested": None, "warned": True, "failure": None, "checker": None})
    monkeypatch.setattr(checking.transformers, "__version__", "5.99.0")
    torch.compiler.reset()  # a graph traced before holds the check's result of its own time
    yield checking
    torch.compiler.reset()


def _broken(model):
    raise AssertionError("generate passed the cache as ['kv_cache']")


def test_failed_self_check_stops_every_forward(untested_release, monkeypatch):
    """Outside the range the first forward runs the self-check; a failure raises, naming what broke, every time."""
    monkeypatch.setattr(untested_release, "_SELF_CHECKS", (("cached generation", _broken),))
    model = RoFormerExtForCausalLM(tiny_config())  # built under from_pretrained's meta device: checked at forward
    for _ in range(2):
        with pytest.raises(IncompatibleTransformersError, match=r"self-check failed under transformers 5\.99\.0"):
            model(torch.tensor([[5, 6, 7]]))


def test_passed_self_check_runs_once(untested_release, monkeypatch):
    calls = []
    monkeypatch.setattr(untested_release, "_SELF_CHECKS", (("counted", calls.append),))
    RoFormerExtForCausalLM(tiny_config())(torch.tensor([[5, 6, 7]]))
    RoFormerExtModel(tiny_config())(torch.tensor([[5, 6, 7]]))
    assert len(calls) == 1 and isinstance(calls[0], RoFormerExtForCausalLM)


def test_self_check_leaves_every_random_generator_as_it_was(untested_release, monkeypatch):
    """No seed reaches any device (`torch.manual_seed` seeds CUDA, MPS and XPU too), and the CPU stream goes on."""
    model = RoFormerExtModel(tiny_config())
    seeded = []
    for module, name in [(torch.cuda, "manual_seed"), (torch.cuda, "manual_seed_all"), (torch.mps, "manual_seed"),
                         (torch.xpu, "manual_seed"), (torch.xpu, "manual_seed_all")]:  # fmt: skip
        monkeypatch.setattr(module, name, lambda seed, where=f"{module.__name__}.{name}": seeded.append(where))
    state = torch.get_rng_state()
    model(torch.tensor([[5, 6, 7]]))
    assert seeded == [] and torch.equal(torch.get_rng_state(), state)


def _on_meta_device():
    with torch.device("meta"):
        RoFormerExtModel(tiny_config())(torch.tensor([[5, 6, 7]]))


def _with_default_device_meta():
    torch.set_default_device("meta")
    try:
        RoFormerExtModel(tiny_config())(torch.tensor([[5, 6, 7]]))
    finally:
        torch.set_default_device(None)


def _under_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    model = RoFormerExtModel(tiny_config())
    with FakeTensorMode(allow_non_fake_inputs=True):
        model(torch.tensor([[5, 6, 7]]))


def _with_default_dtype_bfloat16():
    model = RoFormerExtModel(tiny_config())
    torch.set_default_dtype(torch.bfloat16)
    try:
        model(torch.tensor([[5, 6, 7]]))
    finally:
        torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize(
    "first_forward", [_on_meta_device, _with_default_device_meta, _under_fake_tensors, _with_default_dtype_bfloat16]
)
def test_self_check_runs_apart_from_the_callers_context(untested_release, first_forward):
    """The first forward on the meta device, under FakeTensorMode or another default dtype runs the self-check on
    CPU tensors of its own: it passes there, and so every later forward runs."""
    first_forward()
    RoFormerExtModel(tiny_config())(torch.tensor([[5, 6, 7]]))


def test_compiled_model_runs_the_self_check_before_its_first_forward(untested_release, monkeypatch):
    """While the first compiled forward is traced (with no graph break: fullgraph), and a failed check stops it."""
    calls = []
    monkeypatch.setattr(untested_release, "_SELF_CHECKS", (("counted", calls.append),))
    model = RoFormerExtModel(tiny_config()).eval()
    input_ids = torch.tensor([[5, 6, 7]])
    compiled = torch.compile(model, backend="eager", fullgraph=True)(input_ids).last_hidden_state
    assert len(calls) == 1
    torch.testing.assert_close(compiled, model(input_ids).last_hidden_state)

    torch.compiler.reset()
    monkeypatch.setattr(untested_release, "_policy", {"tested": None, "warned": True, "failure": None, "checker": None})
    monkeypatch.setattr(untested_release, "_SELF_CHECKS", (("cached generation", _broken),))
    with pytest.raises(IncompatibleTransformersError, match="self-check failed"):
        torch.compile(RoFormerExtModel(tiny_config()).eval(), backend="eager")(input_ids)


#: A user's machine: only the saved folder's code (roformer_ext is not importable), a transformers release outside
#: the tested range, maybe one that renamed the cache again. Prints the warnings of our code and the generated ids.
FUTURE_RELEASE = textwrap.dedent(
    """
    import json, sys, warnings
    sys.modules["roformer_ext"] = None  # only the folder's code files
    import torch, transformers
    from transformers import AutoImageProcessor  # (importing it once replaces the module in sys.modules)
    sys.modules["transformers"].__version__ = transformers.__version__ = sys.argv[2]
    if sys.argv[3] == "rename":  # a stand-in release whose generate passes the cache under yet another name
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


def _run_future_release(tmp_path, version: str, mode: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    return subprocess.run(
        [sys.executable, "-c", FUTURE_RELEASE, str(tmp_path / "folder"), version, mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _saved_decoder(tmp_path) -> list[list[int]]:
    torch.manual_seed(0)
    model = RoFormerExtForCausalLM(tiny_config(initializer_range=0.5)).eval()
    model.save_pretrained(tmp_path / "folder")
    return model.generate(torch.tensor([[5, 6, 7, 8]]), max_new_tokens=6, do_sample=False, pad_token_id=0).tolist()


def test_saved_folder_runs_under_a_future_release(tmp_path):
    """A release outside the range that renamed nothing: the folder loads, warns once and generates correctly."""
    expected = _saved_decoder(tmp_path)
    done = _run_future_release(tmp_path, "5.31.0", "same")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ids"] == expected
    assert len(result["warnings"]) == 1 and SUPPORTED_RANGE in result["warnings"][0]


def test_saved_folder_stops_under_a_release_that_renames_the_cache_again(tmp_path):
    """The same folder under a stand-in release whose generate passes the cache as `kv_cache`: the self-check stops
    the load with an error that names what broke and how to get updated code (not silently wrong generation)."""
    _saved_decoder(tmp_path)
    done = _run_future_release(tmp_path, "5.31.0", "rename")
    assert done.returncode != 0
    last_line = done.stderr.strip().splitlines()[-1]
    assert "IncompatibleTransformersError: roformer-ext's self-check failed under transformers 5.31.0" in last_line
    assert "kv_cache" in last_line and "update-code" in last_line and "push-code" in last_line


#: Python's filter for the one warning a release outside the tested range gives by design (tested above): the tests
#: of silence below hold on any release.
IGNORE_UNTESTED_RELEASE = ["-W", "ignore:roformer-ext was tested on"]


def test_import_is_silent():
    """`import roformer_ext` prints nothing: no docstring-checker errors, no warnings (a fresh interpreter)."""
    done = subprocess.run(
        [sys.executable, "-W", "default", *IGNORE_UNTESTED_RELEASE, "-c", "import roformer_ext"],
        capture_output=True,
        text=True,
        cwd=ROOT.parent,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == "", (done.stdout, done.stderr)


def test_cli_help_is_clean():
    done = subprocess.run(
        [sys.executable, *IGNORE_UNTESTED_RELEASE, "-m", "roformer_ext.conversion", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT.parent,
    )
    assert done.returncode == 0 and "[ERROR]" not in done.stdout + done.stderr and done.stderr == ""


def _decoder() -> RoFormerExtForCausalLM:
    torch.manual_seed(0)
    return RoFormerExtForCausalLM(position_sensitive_config()).eval()


def _generated_logits(model, input_ids: torch.Tensor, **settings) -> torch.Tensor:
    """The logits of every generated step, (steps, batch, vocab)."""
    out = model.generate(input_ids, return_dict_in_generate=True, output_logits=True, **settings)
    return torch.stack(out.logits)


@pytest.mark.parametrize("model_class", [RoFormerExtForCausalLM, RoFormerExtModel])
def test_cache_under_either_name_gives_the_same_step(model_class):
    """`cache` on every release; `past_key_values` too: silently where it is still transformers' name, with
    transformers' own FutureWarning where it was renamed (as its models do)."""
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
    model = _decoder()
    first = output_cache(model(torch.randint(5, 99, (1, 4)), use_cache=True))
    if CACHE == "cache":  # transformers' rule where it renamed: the new name wins, with a warning
        with pytest.warns(FutureWarning, match="Both `past_key_values` and `cache` are set"):
            model(torch.randint(5, 99, (1, 1)), cache=first, past_key_values=DynamicCache())
    else:
        with pytest.raises(ValueError, match="Pass the KV cache once"):
            model(torch.randint(5, 99, (1, 1)), cache=first, past_key_values=DynamicCache())


def test_output_carries_the_cache_under_the_installed_name():
    model = _decoder()
    with torch.no_grad():
        output = model(torch.randint(5, 99, (1, 4)), use_cache=True)
    assert CACHE in output.keys() and isinstance(output_cache(output), DynamicCache)
    assert output_cache(output).get_seq_length() == 4
    encoder_output = RoFormerExtModel(tiny_config())(torch.randint(5, 99, (1, 4)))
    assert output_cache(encoder_output) is None  # an encoder keeps no cache


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_greedy_generation_with_cache_equals_recomputation(attn_implementation):
    """5.24 handed the cache under a new name: decoding then ran each step on one token with no cache."""
    torch.manual_seed(0)
    model = RoFormerExtForCausalLM(position_sensitive_config(attn_implementation=attn_implementation)).eval()
    prompt = torch.randint(5, 99, (1, 6))
    settings = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    cached = model.generate(prompt, use_cache=True, **settings)
    recomputed = model.generate(prompt, use_cache=False, **settings)
    assert cached.tolist() == recomputed.tolist()
    cached_logits = _generated_logits(model, prompt, use_cache=True, **settings)
    torch.testing.assert_close(cached_logits, _generated_logits(model, prompt, use_cache=False, **settings),
                               rtol=1e-5, atol=1e-5)  # fmt: skip
    assert_position_sensitive(model, lambda m: _generated_logits(m, prompt, use_cache=True, **settings), 1e-5)
    with torch.no_grad():  # and both are the argmax of the full forward, token by token
        logits = model(cached[:, :-1]).logits[0, prompt.shape[1] - 1 :]
    assert logits.argmax(-1).tolist() == cached[0, prompt.shape[1] :].tolist()


def test_left_padded_batch_and_static_cache_generate():
    model = _decoder()
    prompts = [torch.randint(5, 99, (1, 7)), torch.randint(5, 99, (1, 4))]
    input_ids = torch.zeros(2, 7, dtype=torch.long)
    attention_mask = torch.zeros(2, 7, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, -prompt.shape[1] :] = prompt
        attention_mask[row, -prompt.shape[1] :] = 1
    settings = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    batch = model.generate(input_ids, attention_mask=attention_mask, **settings)
    static = model.generate(input_ids, attention_mask=attention_mask, cache_implementation="static", **settings)
    assert static.tolist() == batch.tolist()
    for row, prompt in enumerate(prompts):
        alone = model.generate(prompt, **settings)
        assert batch[row, -settings["max_new_tokens"] :].tolist() == alone[0, prompt.shape[1] :].tolist()
    # and the logits of every step: padded, static and alone (a random model soon repeats one token)
    batch_logits = _generated_logits(model, input_ids, attention_mask=attention_mask, **settings)
    static_logits = _generated_logits(model, input_ids, attention_mask=attention_mask, cache_implementation="static",
                                      **settings)  # fmt: skip
    torch.testing.assert_close(static_logits, batch_logits, rtol=1e-5, atol=1e-5)
    for row, prompt in enumerate(prompts):
        torch.testing.assert_close(batch_logits[:, row], _generated_logits(model, prompt, **settings)[:, 0],
                                   rtol=1e-5, atol=1e-5)  # fmt: skip
    run = lambda m: _generated_logits(m, input_ids, attention_mask=attention_mask, **settings)  # noqa: E731
    assert_position_sensitive(model, run, 1e-5)


def test_deprecation_guard_catches_a_logged_rename():
    """The autouse guard in conftest.py fails a test on what transformers logs for a rename."""
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
