"""One hidden-states file as vLLM's extraction writes it, checked before it counts (standard library
only: the host's Python may lack numpy at the check's moment, and a file of 0.5 GB is read in C-speed
slices, never element by element).

The file is safetensors: 8 bytes of header length, a JSON header naming each tensor's dtype, shape
and byte range, then the bytes. vLLM writes `hidden_states` [tokens, layers, hidden] in the model's
dtype and `token_ids` [tokens], asynchronously, holding an exclusive flock on `PATH.lock` until the
write is done. A file counts when its token ids are the row's, its shape is [len(row), layers, H]
and every value is finite: what speculators' own check asks, so the trainer never meets a file it
refuses."""

from __future__ import annotations

import array
import asyncio
import fcntl
import json
import mmap
import os
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# dtype -> (bytes per value, (byte, mask) pairs whose bits are all set exactly when the exponent is:
# an infinity or a NaN), read little-endian
_FLOATS = {
    "BF16": (2, ((1, 0x7F), (0, 0x80))),
    "F16": (2, ((1, 0x7C),)),
    "F32": (4, ((3, 0x7F), (2, 0x80))),
    "F64": (8, ((7, 0x7F), (6, 0xF0))),
}
_INTS = {"I64": "q", "I32": "i", "U32": "I", "I16": "h"}
_HEADER_MAX = 100 * 1024 * 1024  # safetensors' own limit
_CHUNK = 1 << 26  # 64 MiB at a time: a whole file is never held in memory


class BadFile(ValueError):
    """Why a file does not count (torn, wrong tokens, wrong shape, non-finite): it is made again."""


@dataclass(frozen=True)
class Checked:
    tokens: int
    layers: int
    hidden: int
    dtype: str
    bytes: int


def dtype_bytes(dtype: str) -> int:
    if dtype not in _FLOATS:
        raise ValueError(f"hidden states in {dtype!r}: expected one of {', '.join(_FLOATS)}")
    return _FLOATS[dtype][0]


def header(path: Path) -> tuple[dict, int, int]:
    """(the tensors' header, where their bytes start, the file's size); BadFile if it is not whole."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise BadFile(f"{path.name}: {size} bytes, shorter than a safetensors header")
            (n,) = struct.unpack("<Q", head)
            if n > _HEADER_MAX or 8 + n > size:
                raise BadFile(f"{path.name}: torn (its header says {n} bytes, the file has {size})")
            meta = json.loads(f.read(n))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadFile(f"{path.name}: unreadable header ({e})") from None
    if not isinstance(meta, dict):
        raise BadFile(f"{path.name}: its header is not a JSON object")
    meta.pop("__metadata__", None)
    end = max((_range(path, k, v)[1] for k, v in meta.items()), default=0)
    if 8 + n + end != size:
        raise BadFile(f"{path.name}: torn ({size} bytes, its header needs {8 + n + end})")
    return meta, 8 + n, size


def _range(path: Path, name: str, t) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in t["data_offsets"])
        shape = [int(x) for x in t["shape"]]
        dtype = str(t["dtype"])
    except (KeyError, TypeError, ValueError):
        raise BadFile(f"{path.name}: tensor {name!r} is not described whole") from None
    width = _FLOATS[dtype][0] if dtype in _FLOATS else array.array(_INTS.get(dtype, "b")).itemsize
    count = 1
    for d in shape:
        count *= d
    if b - a != count * width or a < 0:
        raise BadFile(f"{path.name}: tensor {name!r} has {b - a} bytes for shape {shape} {dtype}")
    return a, b


def check(path: Path, token_ids: list[int], layers: int | None = None) -> Checked:
    """The file's facts if it is the row's hidden states whole and finite, with `layers` layers
    (None: any); BadFile otherwise."""
    meta, start, size = header(path)
    for name in ("hidden_states", "token_ids"):
        if name not in meta:
            raise BadFile(f"{path.name}: no {name!r} tensor")
    hs, ids = meta["hidden_states"], meta["token_ids"]
    got = _token_ids(path, ids, start)
    if got != list(token_ids):
        raise BadFile(
            f"{path.name}: token ids differ from the row's ({_first_difference(got, token_ids)})"
        )
    shape, dtype = [int(x) for x in hs["shape"]], str(hs["dtype"])
    if dtype not in _FLOATS:
        raise BadFile(f"{path.name}: hidden states in {dtype}, not a float type")
    if len(shape) != 3 or shape[0] != len(token_ids) or layers not in (None, shape[1]):
        raise BadFile(
            f"{path.name}: hidden states of shape {shape}, expected "
            f"[{len(token_ids)}, {layers or 'layers'}, hidden size]"
        )
    a, b = (int(x) for x in hs["data_offsets"])
    bad = _first_non_finite(path, start + a, b - a, dtype)
    if bad is not None:
        token = bad // max(1, shape[1] * shape[2])
        raise BadFile(f"{path.name}: a non-finite value (inf or NaN) at token {token}")
    return Checked(shape[0], shape[1], shape[2], dtype, size)


def _token_ids(path: Path, t: dict, start: int) -> list[int]:
    dtype = str(t["dtype"])
    if dtype not in _INTS:
        raise BadFile(f"{path.name}: token ids in {dtype}, not an integer type")
    a, b = (int(x) for x in t["data_offsets"])
    with open(path, "rb") as f:
        f.seek(start + a)
        values = array.array(_INTS[dtype])
        values.frombytes(f.read(b - a))
    if sys.byteorder != "little":
        values.byteswap()
    return values.tolist()


def _first_difference(got: list[int], want: list[int]) -> str:
    if len(got) != len(want):
        return f"{len(got)} tokens, the row has {len(want)}"
    i = next(i for i, (x, y) in enumerate(zip(got, want)) if x != y)
    return f"token {i}: {got[i]}, the row has {want[i]}"


def _numpy():
    """numpy where the host has it (vLLM brings it): a chunk checked at memory speed."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def _non_finite_mapped(np, path: Path, offset: int, length: int, dtype: str) -> int | None:
    """The file mapped, not read: its pages are looked at where they lie, a chunk at a time."""
    width, masks = _FLOATS[dtype]
    kind, mask = f"<u{width}", sum(m << 8 * pos for pos, m in masks)  # the exponent's bits
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size < offset + length:
            raise BadFile(f"{path.name}: torn inside its hidden states")
        if not length:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            values = np.frombuffer(m, dtype=kind, count=length // width, offset=offset)
            step, want = _CHUNK // values.itemsize, np.array(mask, dtype=kind)
            try:
                for i in range(0, len(values), step):
                    bad = np.bitwise_and(values[i : i + step], want) == want
                    if bad.any():
                        return i + int(np.argmax(bad))
                return None
            finally:
                del values  # the map closes only once no array looks at it


def _first_non_finite(path: Path, offset: int, length: int, dtype: str) -> int | None:
    """The index of the first inf or NaN, or None: per chunk, with numpy its exponent bits; else each
    marked byte is mapped to 1 where its mask is set, a chunk where some map has no 1 is finite,
    and the maps are multiplied as big integers (a value is non-finite where every map has a 1)."""
    np = _numpy()
    if np is not None:
        return _non_finite_mapped(np, path, offset, length, dtype)
    width, masks = _FLOATS[dtype]
    tables = [bytes(int(b & m == m) for b in range(256)) for _, m in masks]
    chunk, done = _CHUNK - _CHUNK % width, 0
    with open(path, "rb") as f:
        f.seek(offset)
        while done < length:
            buf = f.read(min(chunk, length - done))
            if not buf:
                raise BadFile(f"{path.name}: torn inside its hidden states")
            maps = [buf[pos::width].translate(table) for (pos, _), table in zip(masks, tables)]
            if not all(b"\x01" in m for m in maps):  # the finite chunk, at memchr's speed
                done += len(buf)
                continue
            hits = -1
            for m in maps:
                hits &= int.from_bytes(m, "little")
            if hits:
                return (done // width) + ((hits & -hits).bit_length() - 1) // 8
            done += len(buf)
    return None


def lock_path(path: Path) -> Path:
    """The lock vLLM holds while it writes `path` (and leaves behind for the reader to remove)."""
    return Path(str(path) + ".lock")


def written(path: Path) -> bool:
    """Whether vLLM is done writing `path`: its `.lock` is gone or no one holds it."""
    lock = lock_path(path)
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


async def wait_written(path: Path, timeout: float) -> None:
    """Until vLLM is done writing `path` (BadFile past `timeout` seconds): a short write is seen at
    once, a long one is not polled hard."""
    deadline, pause = time.monotonic() + timeout, 0.001
    while not written(path):
        if time.monotonic() > deadline:
            raise BadFile(f"{path.name}: still being written after {timeout:g}s")
        await asyncio.sleep(pause)
        pause = min(2 * pause, 0.02)


def write(path: Path, token_ids: list[int], hidden: bytes, layers: int, dtype: str) -> None:
    """A file as vLLM's extraction writes it (the stand-in engine's and the tests'): `hidden`
    holds [len(token_ids), layers, H] values in `dtype`, little-endian."""
    width = dtype_bytes(dtype)
    per_token = width * layers
    if not token_ids or len(hidden) % (len(token_ids) * per_token):
        raise ValueError(f"{len(hidden)} bytes are not [{len(token_ids)}, {layers}, H] in {dtype}")
    size = len(hidden) // (len(token_ids) * per_token)
    ids = array.array("q", token_ids)
    if sys.byteorder != "little":
        ids.byteswap()
    raw = ids.tobytes()
    meta = {
        "hidden_states": {
            "dtype": dtype,
            "shape": [len(token_ids), layers, size],
            "data_offsets": [0, len(hidden)],
        },
        "token_ids": {
            "dtype": "I64",
            "shape": [len(token_ids)],
            "data_offsets": [len(hidden), len(hidden) + len(raw)],
        },
    }
    head = json.dumps(meta, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # safetensors aligns the data to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        f.write(hidden)
        f.write(raw)
