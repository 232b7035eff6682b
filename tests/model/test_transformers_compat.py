"""Current with transformers: one compat module, the declared range enforced, silence, both cache names.

CI runs this file (with the model, generation, Sim, packing, conversion and remote-code tests) on the lowest release
setup.cfg declares and the whole suite on the newest, so each test here is checked on both sides of a rename.
"""

import configparser
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
import transformers
from conftest import _DeprecationRecords, tiny_config
from transformers import DynamicCache

from roformer_ext import RoFormerExtForCausalLM, RoFormerExtModel
from roformer_ext.compat import (
    CACHE,
    LOWEST_TRANSFORMERS,
    SUPPORTED_RANGE,
    TRANSFORMERS_BELOW,
    check_transformers_version,
    output_cache,
)

ROOT = Path(__file__).resolve().parents[2]


def test_declared_range_is_the_enforced_range():
    """setup.cfg's install_requires, the remote-code check and the README say the same range."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    requirements = [line.strip() for line in parser["options"]["install_requires"].splitlines() if line.strip()]
    assert f"transformers>={LOWEST_TRANSFORMERS},<{TRANSFORMERS_BELOW}" in requirements
    assert SUPPORTED_RANGE in (ROOT / "README.md").read_text()


def test_installed_release_is_inside_the_range():
    check_transformers_version()  # the import already ran it; the suite must run on a supported release


@pytest.mark.parametrize("version", ["5.20.2", "5.25.0", "6.0.0", "4.57.6"])
def test_release_outside_the_range_is_refused(version, monkeypatch):
    monkeypatch.delenv("ROFORMER_EXT_ALLOW_UNTESTED_TRANSFORMERS", raising=False)
    with pytest.raises(ImportError, match=r"supports transformers>=.*; transformers " + version.replace(".", r"\.")):
        check_transformers_version(version)


def test_untested_release_runs_when_the_user_says_so(monkeypatch):
    monkeypatch.setenv("ROFORMER_EXT_ALLOW_UNTESTED_TRANSFORMERS", "1")
    check_transformers_version("6.0.0")


REMOTE_LOADER = textwrap.dedent(
    """
    import sys
    sys.modules["roformer_ext"] = None  # only the folder's code files
    import transformers
    transformers.__version__ = sys.argv[2]  # a user's release outside the range
    transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True)
    """
)


def test_remote_code_outside_the_range_fails_loudly(tmp_path):
    RoFormerExtForCausalLM(tiny_config()).save_pretrained(tmp_path / "folder")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    env.pop("ROFORMER_EXT_ALLOW_UNTESTED_TRANSFORMERS", None)
    done = subprocess.run(
        [sys.executable, "-c", REMOTE_LOADER, str(tmp_path / "folder"), "9.0.0"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode != 0
    last_line = done.stderr.strip().splitlines()[-1]
    assert last_line.startswith("ImportError: roformer-ext supports " + SUPPORTED_RANGE), done.stderr[-2000:]


def test_import_is_silent():
    """`import roformer_ext` prints nothing: no docstring-checker errors, no warnings (a fresh interpreter)."""
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", "import roformer_ext"], capture_output=True, text=True, cwd=ROOT.parent
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == "", (done.stdout, done.stderr)


def test_cli_help_is_clean():
    done = subprocess.run(
        [sys.executable, "-m", "roformer_ext.conversion", "--help"], capture_output=True, text=True, cwd=ROOT.parent
    )
    assert done.returncode == 0 and "[ERROR]" not in done.stdout + done.stderr and done.stderr == ""


def _decoder() -> RoFormerExtForCausalLM:
    torch.manual_seed(0)
    return RoFormerExtForCausalLM(tiny_config()).eval()


@pytest.mark.parametrize("model_class", [RoFormerExtForCausalLM, RoFormerExtModel])
def test_cache_under_either_name_gives_the_same_step(model_class):
    """`cache` on every release; `past_key_values` too: silently where it is still transformers' name, with
    transformers' own FutureWarning where it was renamed (as its models do)."""
    torch.manual_seed(0)
    model = model_class(tiny_config(is_decoder=True)).eval()
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
    model = RoFormerExtForCausalLM(tiny_config(attn_implementation=attn_implementation)).eval()
    prompt = torch.randint(5, 99, (1, 6))
    settings = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    cached = model.generate(prompt, use_cache=True, **settings)
    recomputed = model.generate(prompt, use_cache=False, **settings)
    assert cached.tolist() == recomputed.tolist()
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
