"""Our TF-checkpoint reader: files TensorFlow wrote, round trips through tf_checkpoint_writer.py, damaged copies."""

import importlib.util
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_convert_original import DATA, FIXTURES, INDEX, copy_fixture
from tf_checkpoint_writer import write_tf_checkpoint

from roformer_ext.conversion import CheckpointConversionError, tf_checkpoint
from roformer_ext.conversion.tf_checkpoint import TFCheckpointError, TFCheckpointReader, crc32c, read_tf_checkpoint

VARIABLE_COUNTS = {"roformer_v1": 41, "roformer_v2": 14, "roformer_sim": 43, "roformer_sim_ft": 38}


def slow_crc32c(data: bytes) -> int:
    """Bit-by-bit definition, to check the vectorised one against."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def test_crc32c_known_values():
    assert crc32c(b"") == 0
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 test vectors
    assert crc32c(b"\xff" * 32) == 0x62A8AB43


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=0, max_size=3000))
def test_crc32c_matches_bitwise_definition(data):
    assert crc32c(data) == slow_crc32c(data)
    assert crc32c(np.frombuffer(data, dtype=np.uint8)) == slow_crc32c(data)


@pytest.mark.parametrize("name", sorted(VARIABLE_COUNTS))
def test_reads_tensorflow_written_fixture(name):
    reader = TFCheckpointReader(FIXTURES / name)
    assert len(reader) == VARIABLE_COUNTS[name]
    variables = reader.variables
    assert variables["bert/embeddings/word_embeddings"] == (128, 64)
    assert variables["bert/encoder/layer_1/intermediate/dense/kernel"] == (64, 128)
    assert variables["bert/encoder/layer_1/output/dense/kernel"] == (128, 64)
    for variable in reader:  # every stored crc32c verified
        array = reader.get_tensor(variable)
        assert array.dtype == np.float32 and array.shape == variables[variable]
        assert np.isfinite(array).all()
    if name == "roformer_v1":  # gamma = 1 + 0.2 N(0, 1), beta = 0.2 N(0, 1): not swapped
        assert abs(reader.get_tensor("bert/embeddings/LayerNorm/gamma").mean() - 1) < 0.1
        assert abs(reader.get_tensor("bert/embeddings/LayerNorm/beta").mean()) < 0.1


def test_prefix_forms_resolve_to_the_same_checkpoint(tmp_path):
    folder = FIXTURES / "roformer_v2"
    prefix = folder / "bert_model.ckpt"
    assert tf_checkpoint.resolve_checkpoint_prefix(folder) == prefix
    assert tf_checkpoint.resolve_checkpoint_prefix(prefix) == prefix
    assert tf_checkpoint.resolve_checkpoint_prefix(folder / INDEX) == prefix
    # a `checkpoint` state file with the absolute path of the training machine, or none at all
    moved = copy_fixture("roformer_v2", tmp_path / "moved")
    (moved / "checkpoint").write_text('model_checkpoint_path: "/data/train/bert_model.ckpt"\n')
    assert tf_checkpoint.resolve_checkpoint_prefix(moved) == moved / "bert_model.ckpt"
    (moved / "checkpoint").unlink()
    assert tf_checkpoint.resolve_checkpoint_prefix(moved) == moved / "bert_model.ckpt"


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tensorflow is not installed")
@pytest.mark.parametrize("name", sorted(VARIABLE_COUNTS))
def test_matches_tensorflow_reader(name, tmp_path):
    import tensorflow as tf

    ours = TFCheckpointReader(FIXTURES / name)
    prefix = str(FIXTURES / name / "bert_model.ckpt")
    assert dict(tf.train.list_variables(prefix)) == {k: list(v) for k, v in ours.variables.items()}
    for variable in ours:
        np.testing.assert_array_equal(ours.get_tensor(variable), tf.train.load_variable(prefix, variable))
    # and TensorFlow reads what our writer writes
    written = write_tf_checkpoint(tmp_path / "model.ckpt", {"a": np.arange(6, dtype=np.int64).reshape(2, 3)})
    np.testing.assert_array_equal(tf.train.load_variable(str(written), "a"), np.arange(6).reshape(2, 3))


DTYPES = [np.float32, np.float16, np.float64, np.int32, np.int64, np.int8, np.uint8, np.bool_]


TENSOR_DICTS = st.dictionaries(
    st.text("abcxyz_/0123456789", min_size=1, max_size=12),
    hnp.arrays(st.sampled_from(DTYPES), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)),
    min_size=1,
    max_size=6,
)


@settings(max_examples=40, deadline=None)
@given(TENSOR_DICTS)
def test_write_read_round_trip(tensors):
    with tempfile.TemporaryDirectory() as folder:
        write_tf_checkpoint(Path(folder) / "model.ckpt", tensors)
        back = read_tf_checkpoint(folder)
    assert sorted(back) == sorted(tensors)
    for name, array in tensors.items():
        np.testing.assert_array_equal(back[name], array, strict=True)  # values, shape and dtype


def test_missing_folder_or_index(tmp_path):
    assert issubclass(TFCheckpointError, CheckpointConversionError) and issubclass(TFCheckpointError, ValueError)
    with pytest.raises(TFCheckpointError, match="Missing checkpoint index"):
        TFCheckpointReader(tmp_path / "nowhere" / "bert_model.ckpt")
    with pytest.raises(TFCheckpointError, match=r"No TF checkpoint in .*\*\.index"):
        TFCheckpointReader(tmp_path)


def test_truncated_data_shard_names_the_variable(tmp_path):
    folder = copy_fixture("roformer_v1", tmp_path / "v1")
    data = (folder / DATA).read_bytes()
    (folder / DATA).write_bytes(data[: len(data) // 2])
    reader = TFCheckpointReader(folder)
    last = max(reader, key=lambda name: reader.entry(name).offset)
    with pytest.raises(TFCheckpointError, match=rf"Truncated checkpoint data .*{last}.* has {len(data) // 2} bytes"):
        reader.get_tensor(last)


def test_corrupted_data_fails_its_checksum(tmp_path):
    folder = copy_fixture("roformer_v2", tmp_path / "v2")
    reader = TFCheckpointReader(folder)
    entry = reader.entry("bert/encoder/layer_1/output/dense/kernel")
    data = bytearray((folder / DATA).read_bytes())
    data[entry.offset + 7] ^= 0x10
    (folder / DATA).write_bytes(bytes(data))
    with pytest.raises(TFCheckpointError, match=r"checksum mismatch for 'bert/encoder/layer_1/output/dense/kernel'"):
        reader.get_tensor(entry.name)
    assert reader.get_tensor(entry.name, verify_checksum=False).shape == (128, 64)
    reader.get_tensor("bert/encoder/layer_0/output/dense/kernel")  # the others are intact


@pytest.mark.parametrize(
    ("damage", "phrase"),
    [
        # a flipped byte in the data block, the index block, the footer's handles, the magic; a truncated file
        *[(("flip", position), "Corrupted checkpoint index") for position in (10, 200, -48, -47, -3)],
        *[(("keep", keep), "Corrupted checkpoint index") for keep in (0, 20, 300)],
        (("text", 0), "bad table magic"),
    ],
)
def test_corrupted_truncated_or_foreign_index(tmp_path, damage, phrase):
    folder = copy_fixture("roformer_sim", tmp_path / "sim")
    index = bytearray((folder / INDEX).read_bytes())
    kind, where = damage
    if kind == "flip":
        index[where] ^= 0x41
    damaged = {"flip": bytes(index), "keep": bytes(index[:where]), "text": b"not a checkpoint at all, just text " * 4}
    (folder / INDEX).write_bytes(damaged[kind])
    with pytest.raises(TFCheckpointError, match=phrase):
        TFCheckpointReader(folder)


def test_unknown_variable_and_unsupported_dtype(tmp_path):
    write_tf_checkpoint(tmp_path / "m.ckpt", {"x": np.zeros(3, np.float32)})
    reader = TFCheckpointReader(tmp_path)
    with pytest.raises(TFCheckpointError, match="'y' is not in checkpoint"):
        reader.get_tensor("y")
    with pytest.raises(TFCheckpointError, match="dtype complex64 has no TF checkpoint code"):
        write_tf_checkpoint(tmp_path / "c.ckpt", {"z": np.zeros(2, np.complex64)})
