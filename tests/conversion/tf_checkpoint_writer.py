"""Test helper: TF V2 checkpoints in the simplest valid form (one shard, one uncompressed block, empty meta)."""

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from roformer_ext.conversion import tf_checkpoint as tf

_WRITE_CODES = {dtype.str: code for code, dtype in tf._DTYPES.items() if code != tf._BFLOAT16}


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _entry_bytes(entry: tf.TensorEntry) -> bytes:
    shape = b"".join(b"\x12" + _varint(len(d)) + d for d in (b"\x08" + _varint(n) for n in entry.shape))
    out = b"\x08" + _varint(entry.dtype_code) + b"\x12" + _varint(len(shape)) + shape
    if entry.offset:
        out += b"\x20" + _varint(entry.offset)
    if entry.size:
        out += b"\x28" + _varint(entry.size)
    return out + b"\x35" + int(entry.masked_crc32c).to_bytes(4, "little")


def _block(entries: list[tuple[bytes, bytes]]) -> bytes:
    body, restarts = bytearray(), []
    for key, value in entries:  # a restart at every entry: no prefix sharing, simplest valid layout
        restarts.append(len(body))
        body += _varint(0) + _varint(len(key)) + _varint(len(value)) + key + value
    restarts = restarts or [0]
    body += b"".join(r.to_bytes(4, "little") for r in restarts) + len(restarts).to_bytes(4, "little")
    return bytes(body)


def _append_block(out: bytearray, block: bytes) -> bytes:
    handle = _varint(len(out)) + _varint(len(block))
    out += block + b"\x00" + tf.mask_crc(tf.crc32c(block + b"\x00")).to_bytes(4, "little")
    return handle


def _build_table(entries: list[tuple[bytes, bytes]]) -> bytes:
    out = bytearray()
    data_handle = _append_block(out, _block(entries))
    meta_handle = _append_block(out, _block([]))
    index_handle = _append_block(out, _block([(entries[-1][0], data_handle)] if entries else []))
    footer = (meta_handle + index_handle).ljust(tf._FOOTER_SIZE - 8, b"\x00")
    return bytes(out + footer + tf._TABLE_MAGIC.to_bytes(8, "little"))


def write_tf_checkpoint(prefix: str | os.PathLike, tensors: Mapping[str, np.ndarray]) -> Path:
    """Write `tensors` as a single-shard TF V2 checkpoint at `prefix` (plus a `checkpoint` state file)."""
    prefix = Path(prefix)
    data, entries = bytearray(), []
    for name in sorted(tensors, key=lambda n: n.encode("utf-8")):
        array = np.asarray(tensors[name])  # tobytes() below is C order whatever the strides
        little = array.astype(array.dtype.newbyteorder("<"), copy=False)
        code = _WRITE_CODES.get(little.dtype.str)
        if code is None:
            raise tf.TFCheckpointError(f"Cannot write {name!r}: dtype {array.dtype} has no TF checkpoint code here.")
        raw = little.tobytes()
        entry = tf.TensorEntry(name, code, tuple(array.shape), 0, len(data), len(raw), tf.mask_crc(tf.crc32c(raw)))
        entries.append((name.encode("utf-8"), _entry_bytes(entry)))
        data += raw
    header = b"\x08\x01" + b"\x1a\x02\x08\x01"  # num_shards 1, little endian (default), version {producer: 1}
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.index").write_bytes(_build_table([(b"", header), *entries]))
    Path(f"{prefix}.data-00000-of-00001").write_bytes(bytes(data))
    state = f'model_checkpoint_path: "{prefix.name}"\nall_model_checkpoint_paths: "{prefix.name}"\n'
    (prefix.parent / "checkpoint").write_text(state, encoding="utf-8")
    return prefix
