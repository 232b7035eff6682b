"""`roformer-ext-convert original`: parity with bert4keras' stored outputs (tests/fixtures/original_tf), the folder."""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tf_checkpoint_writer import write_tf_checkpoint
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

from roformer_ext.conversion import CheckpointConversionError, original
from roformer_ext.conversion.cli import main
from roformer_ext.conversion.original import convert_original_checkpoint
from roformer_ext.conversion.output_folder import OutputExistsError, output_folder
from roformer_ext.conversion.tf_checkpoint import TFCheckpointReader, read_tf_checkpoint
from roformer_ext.masking_roformer_ext import unilm_attention_mask
from roformer_ext.tokenization_roformer_ext import RoFormerExtTokenizerFast

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "original_tf"
NAMES = ("roformer_v1", "roformer_v2", "roformer_sim", "roformer_sim_ft")
INPUTS = ("single", "pair", "masked", "batch_padded", "long")


def copy_fixture(name: str, target: Path) -> Path:
    shutil.copytree(FIXTURES / name, target)
    for path in target.iterdir():
        path.chmod(0o644)
    return target


def release_folder(tmp_path: Path, tensors: dict, bert_config: dict, name: str = "release") -> Path:
    """A release-style folder from arbitrary variables (for layouts no fixture has)."""
    folder = tmp_path / name
    write_tf_checkpoint(folder / "bert_model.ckpt", tensors)
    (folder / "bert_config.json").write_text(json.dumps(bert_config))
    shutil.copyfile(FIXTURES / "roformer_v1" / "vocab.txt", folder / "vocab.txt")
    return folder


def assert_no_local_paths(folder: Path, *paths: Path) -> None:
    """No file written into `folder` names these absolute paths (a model card is published as it is)."""
    for path in folder.iterdir():
        data = path.read_bytes()
        for local in paths:
            assert str(local).encode() not in data, f"{path.name} contains {local}"


def assert_generator(folder: Path, config: dict, generator: bool) -> bool:
    """A generator is the UniLM decoder stopping at [SEP] (id 3; [PAD] 0 in vocab.txt); others are plain causal."""
    assert config["decoder_attention"] == ("unilm" if generator else "causal")
    assert (folder / "generation_config.json").is_file() is generator
    if generator:
        generation = json.loads((folder / "generation_config.json").read_text())
        assert (generation["eos_token_id"], generation["pad_token_id"]) == (3, 0)
    return generator


def fixture_config(name: str) -> dict:
    return json.loads((FIXTURES / name / "bert_config.json").read_text())


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, Path]:
    """Each fixture converted once by the CLI (its stderr kept under "NAME/stderr"), and Sim with a tanh pooler."""
    root = tmp_path_factory.mktemp("converted")
    out = {}
    for name in NAMES:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            assert main(["original", str(FIXTURES / name), str(root / name)]) == 0
        out[name], out[f"{name}/stderr"] = root / name, err.getvalue()
    for name in ("roformer_sim", "roformer_sim_ft"):
        out[f"{name}_tanh"] = convert_original_checkpoint(
            FIXTURES / name, root / f"{name}_tanh", pooler_activation="tanh"
        )
    return out


def inputs_of(reference, name: str) -> dict[str, torch.Tensor]:
    keys = {"input_ids": "token_ids", "token_type_ids": "segment_ids", "attention_mask": "attention_mask"}
    return {ours: torch.from_numpy(reference[f"{name}/{theirs}"]).long() for ours, theirs in keys.items()}


def compare(reference, key: str, ours: torch.Tensor) -> None:
    """Compare on valid positions (attention_mask == 1): bert4keras computes padded queries differently."""
    name, array = key.split("/")
    expected, actual = reference[key], ours.detach().numpy()
    assert actual.shape == expected.shape, key
    valid = reference[f"{name}/attention_mask"].astype(bool)
    if array == "hidden_states":
        expected, actual = expected[:, valid], actual[:, valid]
    elif "pooler" not in array:
        expected, actual = expected[valid], actual[valid]
    np.testing.assert_allclose(actual, expected, rtol=0, atol=2e-4 if "logits" in array else 1e-4, err_msg=key)


def assert_reproduces(folder: Path, name: str, input_name: str, only: str | None = None) -> None:
    """Every array bert4keras stored for this input (or only `only`) matches ours; `unilm_` ones under the UniLM mask
    (how junnyu's Sim decoder reads the source)."""
    reference = np.load(FIXTURES / name / "reference_outputs.npz")
    base = AutoModel.from_pretrained(folder).eval()
    mlm = "RoFormerExtForMaskedLM" in base.config.architectures and AutoModelForMaskedLM.from_pretrained(folder).eval()
    ours = {}
    for prefix in ["", "unilm_"] if any(k.startswith(f"{input_name}/unilm_") for k in reference.files) else [""]:
        batch = inputs_of(reference, input_name)
        if prefix:
            batch["attention_mask"] = unilm_attention_mask(batch["token_type_ids"], batch["attention_mask"])
        with torch.no_grad():
            result = base(**batch, output_hidden_states=True)
            ours[f"{prefix}sequence_output"] = result.last_hidden_state
            ours[f"{prefix}hidden_states"] = torch.stack(result.hidden_states)
            if result.pooler_output is not None:
                ours[f"{prefix}pooler_output_{base.config.pooler_activation}"] = result.pooler_output
            if mlm:
                ours[f"{prefix}mlm_logits"] = logits = mlm(**batch).logits
                ours[f"{prefix}mlm_probs"] = logits.softmax(-1)
    stored = {key.split("/")[1] for key in reference.files if key.startswith(f"{input_name}/")}
    wanted = {only} if only else stored - {"token_ids", "segment_ids", "attention_mask", "pooler_output_tanh"}
    assert "sequence_output" in wanted or only
    assert wanted <= set(ours), f"no counterpart for {sorted(wanted - set(ours))}"
    for array in sorted(wanted):
        compare(reference, f"{input_name}/{array}", ours[array])


@pytest.mark.parametrize("name", [*NAMES, "roformer_sim_tanh", "roformer_sim_ft_tanh"])
@pytest.mark.parametrize("input_name", INPUTS)
def test_reproduces_bert4keras_outputs(converted, name, input_name):
    only = "pooler_output_tanh" if name.endswith("_tanh") else None
    assert_reproduces(converted[name], name.removesuffix("_tanh"), input_name, only)


def test_padding_changes_nothing_on_valid_positions(converted):
    """Each padded row equals the same row run alone (what bert4keras' own check shows)."""
    reference = np.load(FIXTURES / "roformer_v1" / "reference_outputs.npz")
    batch = inputs_of(reference, "batch_padded")
    model = AutoModelForMaskedLM.from_pretrained(converted["roformer_v1"]).eval()
    with torch.no_grad():
        padded = model(**batch).logits
        for row in range(3):
            length = int(batch["attention_mask"][row].sum())
            alone = model(**{k: v[row : row + 1, :length] for k, v in batch.items()}).logits
            torch.testing.assert_close(padded[row : row + 1, :length], alone, rtol=0, atol=2e-4)


EXPECTED = {  # variant, architecture, pooler, what the CLI prints
    "roformer_v1": ("v1", "RoFormerExtForMaskedLM", None, "RoFormer v1 -> RoFormerExtForMaskedLM."),
    "roformer_v2": ("v2", "RoFormerExtForMaskedLM", None, "RoFormer-V2 -> RoFormerExtForMaskedLM."),
    "roformer_sim": ("sim", "RoFormerExtForMaskedLM", "linear", "RoFormer-Sim -> RoFormerExtForMaskedLM, pooler activation linear."),
    "roformer_sim_ft": ("sim", "RoFormerExtModel", "linear", "RoFormer-Sim -> RoFormerExtModel, pooler activation linear."),
}  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_written_folder(converted, name):
    folder = converted[name]
    variant, architecture, pooler, line = EXPECTED[name]
    assert f"roformer-ext-convert: Variant {variant} (detected): {line}\n" in converted[f"{name}/stderr"]
    assert original.detect_variant(TFCheckpointReader(FIXTURES / name).variables) == variant
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == [architecture]
    assert config["model_type"] == "roformer_ext" and "AutoConfig" in config["auto_map"]
    assert config["layer_norm_eps"] == 1e-7 and config["pooler_activation"] == pooler
    assert config["hidden_act"] == ("relu" if variant == "v2" else "gelu")
    assert config["use_bias"] is (variant != "v2")
    assert config["norm_type"] == ("rms_scale_free" if variant == "v2" else "layer_norm")
    assert config["rope_parameters"]["pair_layout"] == "interleaved"
    assert (folder / "vocab.txt").read_bytes() == (FIXTURES / name / "vocab.txt").read_bytes()
    card = (folder / "README.md").read_text()
    assert f"Variant: **{variant}**" in card and "arXiv:2104.09864" in card
    assert f"roformer-ext-convert original {name} {name}\n" in card  # absolute arguments: folder names only
    assert_no_local_paths(folder, FIXTURES, folder.parent)
    if assert_generator(folder, config, name == "roformer_sim"):  # Sim with its MLM head: UniLM seq2seq
        assert "SimilarSentenceGenerator" in card and "SentenceTransformer(folder)" in card
    for st_file in ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"):
        assert (folder / st_file).is_file() is (pooler is not None)  # SentenceTransformer(folder): pooler_output
    # spot checks of the map itself: a transposed kernel, a norm, a bias, the pooler and the tied decoder
    tf, saved = read_tf_checkpoint(FIXTURES / name), load_file(folder / "model.safetensors")
    prefix = "" if architecture == "RoFormerExtModel" else "roformer."
    pairs = [("layers.1.attention.query.weight", "encoder/layer_1/attention/self/query/kernel")]
    pairs += [("layers.1.output_norm.weight", "encoder/layer_1/output/LayerNorm/gamma")] * (variant != "v2")
    pairs += [("layers.0.feed_forward.output.bias", "encoder/layer_0/output/dense/bias")] * (variant != "v2")
    for ours, theirs in pairs + [("pooler.dense.weight", "pooler/dense/kernel")] * bool(pooler):
        array = tf[f"bert/{theirs}"]
        np.testing.assert_array_equal(saved[prefix + ours].numpy(), array.T if theirs.endswith("kernel") else array)
    if architecture == "RoFormerExtForMaskedLM":
        model = AutoModelForMaskedLM.from_pretrained(folder)
        assert model.lm_head.decoder.weight.data_ptr() == model.roformer.embeddings.word_embeddings.weight.data_ptr()


@pytest.mark.parametrize("name", ["roformer_v1", "roformer_sim_ft"])
def test_tokenizer_reproduces_fixture_ids(converted, name):
    reference = np.load(FIXTURES / name / "reference_outputs.npz")
    tokenizer = AutoTokenizer.from_pretrained(converted[name])
    assert isinstance(tokenizer, RoFormerExtTokenizerFast)
    assert tokenizer.segmenter is None  # a char vocabulary: no jieba
    assert tokenizer("今天天气很好，我想去公园玩。")["input_ids"] == reference["single/token_ids"][0].tolist()
    pair = tokenizer("我想去公园玩", "今天天气很好吗？")
    assert pair["input_ids"] == reference["pair/token_ids"][0].tolist()
    assert pair["token_type_ids"] == reference["pair/segment_ids"][0].tolist()


def test_word_vocabulary_folder_works_as_remote_code_in_a_fresh_process(tmp_path):
    """A word vocabulary (as in chinese_roformer_L-12_H-768_A-12) gets jieba; remote code gives the same logits, ids."""
    src = copy_fixture("roformer_v1", tmp_path / "src")
    chars = (src / "vocab.txt").read_text(encoding="utf-8").splitlines()
    words = ["今天", "天气", "公园", "我们", "一起"]
    (src / "vocab.txt").write_text("\n".join(chars[: 128 - len(words)] + words) + "\n", encoding="utf-8")
    out = convert_original_checkpoint(src, tmp_path / "out")
    assert json.loads((out / "tokenizer_config.json").read_text())["segmenter"] == "jieba"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"), PYTHONNOUSERSITE="1")
    command = [sys.executable, "-I", "-c", REMOTE_SCRIPT, str(out), str(FIXTURES / "roformer_v1"), *TEXTS]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    remote = json.loads(result.stdout.strip().splitlines()[-1])
    assert remote["max_diff"] < 2e-4 and remote["segmenter"] == "jieba"
    assert all(module.startswith("transformers_modules") for module in remote["modules"]), remote["modules"]
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert remote["ids"] == tokenizer(TEXTS)["input_ids"]
    assert remote["ids"][1][1:-1] == tokenizer.convert_tokens_to_ids(["我们", "一起", "去", "公园"])  # jieba's words


TEXTS = ["今天天气很好，我想去公园玩。", "我们一起去公园", "Café 1998年！"]
REMOTE_SCRIPT = """
import json, sys
sys.modules["roformer_ext"] = None  # any `import roformer_ext` now fails
import numpy as np, torch
from transformers import AutoModelForMaskedLM, AutoTokenizer
folder, fixture, texts = sys.argv[1], sys.argv[2], sys.argv[3:]
model = AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
reference = np.load(fixture + "/reference_outputs.npz")
with torch.no_grad():
    logits = model(torch.from_numpy(reference["single/token_ids"]).long()).logits
diff = float(np.abs(logits.numpy() - reference["single/mlm_logits"]).max())
modules = [type(model).__module__, type(tokenizer).__module__]
print(json.dumps(dict(modules=modules, segmenter=tokenizer.segmenter, ids=tokenizer(texts)["input_ids"], max_diff=diff)))
"""


def test_gpt_variant_is_a_causal_lm(converted, tmp_path, capsys):
    out = tmp_path / "gpt"
    assert main(["original", str(FIXTURES / "roformer_v1"), str(out), "--variant", "gpt"]) == 0
    assert "Variant gpt (forced with --variant): RoFormer-GPT -> RoFormerExtForCausalLM." in capsys.readouterr().err
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["RoFormerExtForCausalLM"] and config["is_decoder"] is True
    gpt = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([[2, 45, 46, 46, 47, 48, 49, 5, 50, 51]])
    mlm = AutoModelForMaskedLM.from_pretrained(converted["roformer_v1"]).eval()
    lower_triangle = torch.ones(10, 10, dtype=torch.bool).tril()[None, None]  # bert4keras application='lm'
    with torch.no_grad():
        causal = gpt(ids).logits
        torch.testing.assert_close(causal, mlm(ids, attention_mask=lower_triangle).logits, rtol=0, atol=2e-4)
        torch.testing.assert_close(causal[:, :4], gpt(ids[:, :4]).logits, rtol=0, atol=2e-4)
        generated = gpt.generate(ids[:, :3], max_new_tokens=3, do_sample=False)
    assert generated.shape == (1, 6)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-7) -> np.ndarray:
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def test_embedding_size_differs_from_hidden(tmp_path):
    """ALBERT-style factorised embeddings: the mapping in is the projection, the MLM transform maps back to E."""
    bert_config = {**fixture_config("roformer_v1"), "embedding_size": 32}
    rng = np.random.default_rng(7)
    specs = original.map_original_variables(bert_config, "v1", with_pooler=False, with_mlm_head=True)
    tensors = {s.tf_name: rng.normal(size=s.tf_shape).astype(np.float32) * 0.3 for s in specs}
    out = convert_original_checkpoint(release_folder(tmp_path, tensors, bert_config), tmp_path / "out")
    model = AutoModelForMaskedLM.from_pretrained(out).eval()
    assert model.config.embedding_size == 32
    ids, segments = [2, 45, 46, 47, 3], [0, 0, 0, 1, 1]
    with torch.no_grad():
        result = model(torch.tensor([ids]), token_type_ids=torch.tensor([segments]), output_hidden_states=True)
    t = {re.sub(r"^(bert/(encoder/)?|cls/predictions/)", "", k): v for k, v in tensors.items()}
    embedded = t["embeddings/word_embeddings"][ids] + t["embeddings/token_type_embeddings"][segments]
    embedded = layer_norm(embedded, t["embeddings/LayerNorm/gamma"], t["embeddings/LayerNorm/beta"])
    projected = embedded @ t["embedding_hidden_mapping_in/kernel"] + t["embedding_hidden_mapping_in/bias"]
    np.testing.assert_allclose(result.hidden_states[0][0].numpy(), projected, rtol=0, atol=1e-4)
    # MLM head: dense H -> E, exact gelu, LayerNorm, tied embeddings, output bias
    dense = result.hidden_states[-1][0].numpy() @ t["transform/dense/kernel"] + t["transform/dense/bias"]
    dense = torch.nn.functional.gelu(torch.from_numpy(dense)).numpy()
    normed = layer_norm(dense, t["transform/LayerNorm/gamma"], t["transform/LayerNorm/beta"])
    logits = normed @ t["embeddings/word_embeddings"].T + t["output_bias"]
    np.testing.assert_allclose(result.logits[0].numpy(), logits, rtol=0, atol=2e-4)


def test_v2_with_factorised_embeddings_is_refused(tmp_path):
    bert_config = {**fixture_config("roformer_v2"), "embedding_size": 32}
    specs = original.map_original_variables(bert_config, "v2", with_pooler=False, with_mlm_head=True)
    tensors = {s.tf_name: np.zeros(s.tf_shape, np.float32) for s in specs}
    with pytest.raises(CheckpointConversionError, match="Output-Mapping"):
        convert_original_checkpoint(release_folder(tmp_path, tensors, bert_config), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _retensor(src: Path, edit) -> None:
    """Rewrite the checkpoint in `src` with its variables changed by `edit` (a dict -> dict)."""
    write_tf_checkpoint(src / "bert_model.ckpt", edit(read_tf_checkpoint(src)))


def _misfit(tensors: dict) -> dict:
    del tensors["bert/encoder/layer_1/attention/self/key/bias"]
    tensors["bert/encoder/layer_1/attention/self/extra/kernel"] = np.zeros((64, 64), np.float32)
    tensors["bert/encoder/layer_0/intermediate/dense/kernel"] = np.zeros((64, 96), np.float32)
    return tensors


DATA, INDEX = "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index"
# fmt: off
FAILURES = {  # fixture, damage to its copy, extra arguments, key phrases of the error
    **{f"missing {m}": ("roformer_v1", lambda s, m=m: (s / m).unlink(), [], [rf"(Missing|No TF checkpoint).*{m.split('.')[0]}"])
       for m in ("bert_config.json", "vocab.txt", INDEX)},
    "misfit variables": ("roformer_v1", lambda s: _retensor(s, _misfit), [], [
        "does not match a RoFormer v1",
        re.escape("missing variable bert/encoder/layer_1/attention/self/key/bias (expected shape [64])"),
        re.escape("unexpected variable bert/encoder/layer_1/attention/self/extra/kernel (shape [64, 64])"),
        re.escape("variable bert/encoder/layer_0/intermediate/dense/kernel has shape [64, 96], expected [64, 128]")]),
    "config with a layer too many": ("roformer_v2", lambda s: (s / "bert_config.json").write_text(json.dumps(
        {**fixture_config("roformer_v2"), "num_hidden_layers": 3})), [],
        [re.escape("missing variable bert/encoder/layer_2/output/dense/kernel (expected shape [128, 64])")]),
    "vocabulary larger than the embeddings": ("roformer_v1", lambda s: (s / "vocab.txt").write_text(
        (s / "vocab.txt").read_text(encoding="utf-8") + "多\n余\n", encoding="utf-8"), [],
        ["vocab.txt has 130 entries but the embeddings only 128 rows"]),
    "missing data shard": ("roformer_v1", lambda s: (s / DATA).unlink(), [], [r"Missing checkpoint data shard.*data-00000-of-00001"]),
    "unknown variant": ("roformer_v1", lambda s: _retensor(s, lambda t: {"model/dense/kernel": np.zeros((4, 4), np.float32)}),
        [], ["Unknown checkpoint variant.*model/dense/kernel"]),
    "norms without biases": ("roformer_v1", lambda s: _retensor(s, lambda t: {k: v for k, v in t.items() if not k.endswith(("bias", "beta"))}),
        [], ["Unknown checkpoint variant: it has norm parameters and no biases"]),
    "v1 forced to v2": ("roformer_v1", None, ["--variant", "v2"],
        ["does not match a RoFormer v2", re.escape("unexpected variable bert/embeddings/LayerNorm/gamma (shape [64])")]),
    "v2 forced to sim": ("roformer_v2", None, ["--variant", "sim"], ["does not match a RoFormer sim", "missing variable bert/pooler/dense/kernel"]),
    "pooler activation without a pooler": ("roformer_v1", None, ["--pooler-activation", "tanh"], ["no pooler"]),
    "truncated data": ("roformer_sim", lambda s: (s / DATA).write_bytes((s / DATA).read_bytes()[:-1000]), [], ["Truncated checkpoint data"]),
    "corrupted index": ("roformer_sim", lambda s: (s / INDEX).write_bytes((s / INDEX).read_bytes()[:20]), [], ["Corrupted checkpoint index"]),
    "no source folder": ("roformer_v1", lambda s: shutil.rmtree(s), [], ["Source folder .* does not exist"]),
}
# fmt: on


@pytest.mark.parametrize("case", FAILURES)
def test_clear_failures_leave_nothing(tmp_path, capsys, case):
    name, damage, extra, phrases = FAILURES[case]
    src = copy_fixture(name, tmp_path / "src") if damage else FIXTURES / name
    if damage:
        damage(src)
    assert main(["original", str(src), str(tmp_path / "out"), *extra]) != 0
    message = capsys.readouterr().err
    assert "roformer-ext-convert: error:" in message
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out") or p.name == "out"]  # no temporary either
    for phrase in phrases:
        assert re.search(phrase, message), (phrase, message)
    if case == "unknown variant":  # the Python API raises it, a ValueError
        with pytest.raises(ValueError, match="Unknown checkpoint variant"):
            convert_original_checkpoint(src, tmp_path / "out")


def test_optimizer_state_is_ignored(tmp_path):
    tensors = read_tf_checkpoint(FIXTURES / "roformer_v2")
    tensors["global_step"] = np.array(1000, np.int64)
    tensors["bert/encoder/layer_0/output/dense/kernel/adam_m"] = np.zeros((128, 64), np.float32)
    tensors["bert/encoder/layer_0/output/dense/kernel/AdamWeightDecayOptimizer_1"] = np.zeros((128, 64), np.float32)
    src = release_folder(tmp_path, tensors, fixture_config("roformer_v2"))
    plan = original.plan_conversion(TFCheckpointReader(src).variables, fixture_config("roformer_v2"))
    assert plan.variant == "v2" and len(plan.ignored) == 3 and "global_step" in plan.ignored
    convert_original_checkpoint(src, tmp_path / "out")


def test_model_card_keeps_relative_arguments(converted, tmp_path, monkeypatch):
    """Relative paths are recorded exactly as typed; absolute ones (Python API too) as folder names only."""
    monkeypatch.chdir(FIXTURES.parent)
    out = tmp_path / "out"
    assert main(["original", "original_tf/roformer_v2", str(out), "--variant", "v2"]) == 0
    card = (out / "README.md").read_text()
    assert "roformer-ext-convert original original_tf/roformer_v2 out --variant v2\n" in card
    assert "# roformer_v2 (roformer-ext)" in card
    assert_no_local_paths(out, FIXTURES, tmp_path)
    api = converted["roformer_sim_tanh"]
    card = (api / "README.md").read_text()
    assert "roformer-ext-convert original roformer_sim roformer_sim_tanh --pooler-activation tanh\n" in card
    assert_no_local_paths(api, FIXTURES, api.parent)


def test_cli_help_and_bad_variant(capsys):
    with pytest.raises(SystemExit) as info:
        main(["original", "--help"])
    assert info.value.code == 0 and "--pooler-activation" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["original", "a", "b", "--variant", "v3"])
    assert info.value.code != 0 and "invalid choice: 'v3'" in capsys.readouterr().err


def test_output_folder_is_all_or_nothing(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), output_folder(out) as tmp:
        (tmp / "half.json").write_text("{}")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with output_folder(out) as tmp:
        assert tmp.parent == tmp_path and tmp != out and not out.exists()
        (tmp / "config.json").write_text('{"model_type": "roformer_ext"}')  # what a converter writes
    assert [p.name for p in out.iterdir()] == ["config.json"]
    with pytest.raises(KeyboardInterrupt), output_folder(out, force=True):
        raise KeyboardInterrupt  # with force, the old folder stays until the new one is complete
    assert [p.name for p in out.iterdir()] == ["config.json"]
    with output_folder(out, force=True) as tmp:
        (tmp / "new.json").write_text("{}")
    assert [p.name for p in out.iterdir()] == ["new.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    (tmp_path / "empty").mkdir()  # an empty folder may be replaced too
    with output_folder(tmp_path / "empty", force=True) as tmp:
        (tmp / "new.json").write_text("{}")
    assert [p.name for p in (tmp_path / "empty").iterdir()] == ["new.json"]
    with pytest.raises(OutputExistsError, match="is not a roformer-ext folder"), output_folder(out, force=True):
        pass  # new.json is no converter output
    assert [p.name for p in out.iterdir()] == ["new.json"]
