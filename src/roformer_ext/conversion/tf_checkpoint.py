"""Read TensorFlow V2-format checkpoints without TensorFlow, checking every checksum, bound and size.

`PREFIX.index` is a LevelDB-style SSTable (blocks with a masked crc32c, an index block, a 48-byte footer): key "" holds
a `BundleHeaderProto`, every other key a variable's `BundleEntryProto` (dtype, shape, shard, offset, size, crc32c)
locating its bytes in `PREFIX.data-0000i-of-0000n`. Supported: uncompressed blocks, whole numeric tensors.
"""

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .files import CheckpointConversionError


class TFCheckpointError(CheckpointConversionError):
    """The checkpoint files are missing, truncated, corrupted or use a feature this reader does not support."""


class _FormatError(Exception):
    """Malformed bytes; the reader re-raises it as TFCheckpointError with the file name."""


# crc32c: Castagnoli CRC, vectorised with numpy: the buffer is cut into N equal chunks whose CRCs advance together
# one byte per step, then merged pairwise. Merging works because the CRC register is linear over GF(2): the
# register after `A || B` equals Z_|B|(register after A) xor crc_from_zero(B), Z_n being "feed n zero bytes".

_CRC_POLY = 0x82F63B78
_CRC_MASK_DELTA = 0xA282EAD8
_CRC_TABLE = np.arange(256, dtype=np.uint32)
for _ in range(8):
    _CRC_TABLE = np.where(_CRC_TABLE & 1, (_CRC_TABLE >> 1) ^ np.uint32(_CRC_POLY), _CRC_TABLE >> 1).astype(np.uint32)


def _apply_op(op: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Apply a GF(2)-linear map given by the images of the 32 bits (op[i] = map(1 << i)) to every x."""
    out = np.zeros_like(x)
    for bit in range(32):
        out ^= op[bit] * ((x >> np.uint32(bit)) & np.uint32(1))
    return out


@functools.cache
def _zeros_op(log2_n: int) -> np.ndarray:
    """The map Z_n (n = 2**log2_n): the CRC register after feeding n zero bytes, as 32 bit images."""
    if log2_n == 0:
        reg = np.uint32(1) << np.arange(32, dtype=np.uint32)
        return (_CRC_TABLE[reg & np.uint32(0xFF)] ^ (reg >> np.uint32(8))).astype(np.uint32)
    half = _zeros_op(log2_n - 1)
    return _apply_op(half, half)


def _feed_zeros(register: int, n: int) -> int:
    reg = np.array([register], dtype=np.uint32)
    for bit in range(n.bit_length()):
        if n >> bit & 1:
            reg = _apply_op(_zeros_op(bit), reg)
    return int(reg[0])


def crc32c(data: bytes | bytearray | memoryview | np.ndarray) -> int:
    """CRC-32C (Castagnoli) of `data`, as TensorFlow and LevelDB compute it (unmasked)."""
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
    n = buf.size
    log2_chunk = min(10, max(0, (n.bit_length() - 1) // 2))  # chunks of about sqrt(n) bytes, at most 1 KiB
    chunk = 1 << log2_chunk
    head = (-n) % chunk
    if head:  # leading zero bytes fed to a zero register leave it zero, so padding in front is free
        buf = np.concatenate([np.zeros(head, dtype=np.uint8), buf])
    columns = np.ascontiguousarray(buf.reshape(-1, chunk).T)  # (chunk, n_chunks)
    regs = np.zeros(columns.shape[1], dtype=np.uint32)
    for row in columns:
        regs = _CRC_TABLE[(regs ^ row) & np.uint32(0xFF)] ^ (regs >> np.uint32(8))
    level = log2_chunk
    while regs.size > 1:
        if regs.size % 2:
            regs = np.concatenate([np.zeros(1, dtype=np.uint32), regs])
        regs = _apply_op(_zeros_op(level), regs[0::2]) ^ regs[1::2]
        level += 1
    raw = int(regs[0]) if n else 0
    return (_feed_zeros(0xFFFFFFFF, n) ^ raw) ^ 0xFFFFFFFF


def mask_crc(crc: int) -> int:
    """LevelDB / TF store CRCs rotated and offset so that a CRC of data containing CRCs stays well spread."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise _FormatError("varint runs past the end of its buffer")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _FormatError("varint longer than 10 bytes")


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _proto_fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """Yield (field number, value) of a serialized protobuf message; enough of the wire format for bundles."""
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if pos + width > len(buf):
                raise _FormatError("fixed-width protobuf field runs past the end")
            value, pos = int.from_bytes(buf[pos : pos + width], "little"), pos + width
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            if pos + length > len(buf):
                raise _FormatError("length-delimited protobuf field runs past the end")
            value, pos = bytes(buf[pos : pos + length]), pos + length
        else:
            raise _FormatError(f"unsupported protobuf wire type {wire}")
        yield number, value


#: The index file is a LevelDB table.
_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_SIZE = 48  # two block handles padded to 40 bytes + 8-byte magic
_BLOCK_TRAILER = 5  # compression type byte + masked crc32c


def _read_block(raw: bytes, offset: int, size: int) -> bytes:
    end = offset + size + _BLOCK_TRAILER
    if end > len(raw):
        raise _FormatError(f"block at offset {offset} (size {size}) runs past the end of the file ({len(raw)} bytes)")
    contents, kind = raw[offset : offset + size], raw[offset + size]
    stored = int.from_bytes(raw[offset + size + 1 : end], "little")
    if mask_crc(crc32c(raw[offset : offset + size + 1])) != stored:
        raise _FormatError(f"checksum mismatch in the block at offset {offset}")
    if kind != 0:
        raise _FormatError(
            f"block at offset {offset} is compressed (type {kind}); only uncompressed tables are supported"
        )
    return contents


def _block_entries(block: bytes) -> Iterator[tuple[bytes, bytes]]:
    if len(block) < 4:
        raise _FormatError("block shorter than its restart count")
    num_restarts = int.from_bytes(block[-4:], "little")
    limit = len(block) - 4 - 4 * num_restarts
    if limit < 0:
        raise _FormatError("block restart array larger than the block")
    pos, key = 0, b""
    while pos < limit:
        shared, pos = _read_varint(block, pos)
        unshared, pos = _read_varint(block, pos)
        value_len, pos = _read_varint(block, pos)
        if shared > len(key) or pos + unshared + value_len > limit:
            raise _FormatError("block entry runs past the end of its block")
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        yield key, block[pos : pos + value_len]
        pos += value_len


def _read_table(raw: bytes) -> list[tuple[bytes, bytes]]:
    if len(raw) < _FOOTER_SIZE:
        raise _FormatError(f"file is {len(raw)} bytes, shorter than the {_FOOTER_SIZE}-byte table footer")
    footer = raw[-_FOOTER_SIZE:]
    if int.from_bytes(footer[-8:], "little") != _TABLE_MAGIC:
        raise _FormatError("bad table magic number (not a TF checkpoint index, or truncated)")
    meta_offset, pos = _read_varint(footer, 0)
    meta_size, pos = _read_varint(footer, pos)
    index_offset, pos = _read_varint(footer, pos)
    index_size, _ = _read_varint(footer, pos)
    _read_block(raw, meta_offset, meta_size)  # TF stores nothing there; checked only to catch a damaged footer
    entries: list[tuple[bytes, bytes]] = []
    for _, handle in _block_entries(_read_block(raw, index_offset, index_size)):
        offset, pos = _read_varint(handle, 0)
        entries.extend(_block_entries(_read_block(raw, offset, _read_varint(handle, pos)[0])))
    return entries


#: TF DataType enum -> numpy dtype; bfloat16 is read as its 16 bits, then widened to float32 (numpy has no bfloat16).
_DTYPES = {code: np.dtype(name) for code, name in {1: "<f4", 2: "<f8", 3: "<i4", 4: "u1", 5: "<i2", 6: "i1", 9: "<i8",
           10: "?", 14: "<u2", 17: "<u2", 19: "<f2", 22: "<u4", 23: "<u8"}.items()}  # fmt: skip
_BFLOAT16 = 14
_UNSUPPORTED = {7: "string", 8: "complex64", 18: "complex128", 20: "resource", 21: "variant"}
#: BundleEntryProto field numbers.
_ENTRY_FIELDS = {1: "dtype_code", 2: "shape", 3: "shard_id", 4: "offset", 5: "size", 6: "masked_crc32c",
                 7: "partitioned"}  # fmt: skip


@dataclass(frozen=True)
class TensorEntry:
    """Where one variable lives: what a BundleEntryProto says about it."""

    name: str
    dtype_code: int
    shape: tuple[int, ...]
    shard_id: int = 0
    offset: int = 0
    size: int = 0
    masked_crc32c: int | None = None
    partitioned: bool = False

    @property
    def dtype_name(self) -> str:
        if self.dtype_code == _BFLOAT16:
            return "bfloat16"
        known = _DTYPES.get(self.dtype_code)
        return known.name if known else _UNSUPPORTED.get(self.dtype_code, f"dtype #{self.dtype_code}")


def _parse_shape(buf: bytes) -> tuple[int, ...]:
    dims = []
    for number, value in _proto_fields(buf):
        if number == 2:
            dims.append(_signed64(dict(_proto_fields(value)).get(1, 0)))
        elif number == 3 and value:
            raise _FormatError("tensor of unknown rank")
    return tuple(dims)


def _parse_entry(name: str, buf: bytes) -> TensorEntry:
    convert = {2: _parse_shape, 4: _signed64, 5: _signed64, 7: lambda value: True}
    fields = {"dtype_code": 0, "shape": ()}
    for number, value in _proto_fields(buf):
        if number in _ENTRY_FIELDS:
            fields[_ENTRY_FIELDS[number]] = convert.get(number, lambda v: v)(value)
    return TensorEntry(name, **fields)


def _state_file_prefix(folder: Path) -> Path | None:
    """The prefix a `checkpoint` state file names; an absolute path of the training machine falls back to the folder."""
    state = folder / "checkpoint"
    if not state.is_file():
        return None
    for line in state.read_text(encoding="utf-8", errors="replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model_checkpoint_path":
            named = Path(value.strip().strip('"'))
            for candidate in (named, folder / named, folder / named.name):
                if Path(f"{candidate}.index").is_file():
                    return candidate
    return None


def resolve_checkpoint_prefix(path: str | os.PathLike) -> Path:
    """Accept a folder, a prefix (`.../bert_model.ckpt`) or the `.index` file itself; return the prefix."""
    path = Path(path)
    if path.suffix == ".index" and path.is_file():
        return path.with_suffix("")
    if path.is_dir():
        prefix = _state_file_prefix(path)
        if prefix is not None:
            return prefix
        indexes = sorted(path.glob("*.index"))
        if len(indexes) == 1:
            return indexes[0].with_suffix("")
        if not indexes:
            raise TFCheckpointError(
                f"No TF checkpoint in {path}: expected a `*.index` file (e.g. bert_model.ckpt.index)."
            )
        names = ", ".join(p.name for p in indexes)
        raise TFCheckpointError(f"Several checkpoints in {path} ({names}); pass the prefix of the one to read.")
    if Path(f"{path}.index").is_file():
        return path
    raise TFCheckpointError(f"Missing checkpoint index {path}.index (no such file or folder {path}).")


class TFCheckpointReader:
    """One TF V2 checkpoint: `variables` (names -> shapes) and `get_tensor(name)`, as `tf.train` gives them."""

    def __init__(self, path: str | os.PathLike):
        self.prefix = resolve_checkpoint_prefix(path)
        self.index_path = Path(f"{self.prefix}.index")
        try:
            table = _read_table(self.index_path.read_bytes())
            header = dict(_proto_fields(table[0][1])) if table and table[0][0] == b"" else None
            if header is None:
                raise _FormatError("no bundle header entry (empty key)")
            self.num_shards = int(header.get(1, 1))
            self.big_endian = int(header.get(2, 0)) == 1
            self._entries = {k.decode("utf-8"): _parse_entry(k.decode("utf-8"), v) for k, v in table[1:]}
        except (_FormatError, UnicodeDecodeError) as err:
            raise TFCheckpointError(f"Corrupted checkpoint index {self.index_path}: {err}.") from None
        shards = range(self.num_shards)
        self.shard_paths = [Path(f"{self.prefix}.data-{i:05d}-of-{self.num_shards:05d}") for i in shards]
        missing = [str(p) for p in self.shard_paths if not p.is_file()]
        if missing:
            raise TFCheckpointError(f"Missing checkpoint data shard(s): {', '.join(missing)}.")

    @property
    def variables(self) -> dict[str, tuple[int, ...]]:
        return {name: entry.shape for name, entry in sorted(self._entries.items())}

    def entry(self, name: str) -> TensorEntry:
        if name not in self._entries:
            raise TFCheckpointError(f"Variable {name!r} is not in checkpoint {self.prefix}.")
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def get_tensor(self, name: str, verify_checksum: bool = True) -> np.ndarray:
        """Read one variable; bfloat16 comes back as float32."""
        entry = self.entry(name)
        if entry.partitioned:
            raise TFCheckpointError(
                f"Variable {name!r} is partitioned into slices, which this reader does not support."
            )
        if entry.dtype_code not in _DTYPES:
            raise TFCheckpointError(f"Variable {name!r} has unsupported dtype {entry.dtype_name}.")
        if not 0 <= entry.shard_id < self.num_shards:
            raise TFCheckpointError(
                f"Corrupted checkpoint index {self.index_path}: {name!r} points to shard {entry.shard_id} "
                f"of {self.num_shards}."
            )
        dtype_name, dtype = entry.dtype_name, _DTYPES[entry.dtype_code]
        expected = int(np.prod(entry.shape, dtype=np.int64)) * dtype.itemsize
        if entry.size != expected or entry.offset < 0 or any(d < 0 for d in entry.shape):
            raise TFCheckpointError(
                f"Corrupted checkpoint index {self.index_path}: {name!r} ({dtype_name}, shape {list(entry.shape)}) "
                f"should take {expected} bytes but the index says {entry.size} at offset {entry.offset}."
            )
        shard = self.shard_paths[entry.shard_id]
        with open(shard, "rb") as handle:
            handle.seek(entry.offset)
            raw = handle.read(entry.size)
        if len(raw) != entry.size:
            raise TFCheckpointError(
                f"Truncated checkpoint data {shard}: {name!r} needs bytes [{entry.offset}, {entry.offset + entry.size})"
                f" but the file has {shard.stat().st_size} bytes. Download it again."
            )
        if verify_checksum and entry.masked_crc32c is not None and mask_crc(crc32c(raw)) != entry.masked_crc32c:
            raise TFCheckpointError(
                f"Corrupted checkpoint data {shard}: checksum mismatch for {name!r}. Download it again."
            )
        array = np.frombuffer(raw, dtype=dtype.newbyteorder(">") if self.big_endian else dtype).reshape(entry.shape)
        if dtype_name == "bfloat16":
            return (array.astype(np.uint32) << 16).view(np.float32)
        return array.astype(dtype.newbyteorder("="), copy=True)


def read_tf_checkpoint(path: str | os.PathLike, names: list[str] | None = None) -> dict[str, np.ndarray]:
    """Every variable (or those in `names`) of a TF checkpoint as numpy arrays."""
    reader = TFCheckpointReader(path)
    return {name: reader.get_tensor(name) for name in (names if names is not None else list(reader))}
