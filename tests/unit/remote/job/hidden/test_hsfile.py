"""A hidden-states file is checked before it counts: whole, the row's token ids, the shape
[tokens, layers, hidden], every value finite, in each float type vLLM writes."""

from __future__ import annotations

import fcntl
import os
import struct

import pytest

from remote.job.hidden import hsfile

IDS = [11, 12, 13]


@pytest.fixture(params=["numpy", "stdlib"], autouse=True)
def checker(request, monkeypatch):
    """Every check twice: with numpy (as on a host vLLM brought it to) and with the standard
    library only (the stand-in engine's host)."""
    if request.param == "stdlib":
        monkeypatch.setattr(hsfile, "_numpy", lambda: None)
    else:
        assert hsfile._numpy() is not None
    return request.param


def finite(n_tokens: int, layers: int, hidden: int, width: int) -> bytearray:
    return bytearray(0x11 for _ in range(n_tokens * layers * hidden * width))


def made(tmp_path, dtype="BF16", ids=IDS, layers=4, hidden=8, raw=None):
    width = hsfile.dtype_bytes(dtype)
    path = tmp_path / "x.safetensors"
    hsfile.write(path, ids, bytes(raw or finite(len(ids), layers, hidden, width)), layers, dtype)
    return path


def test_a_whole_file_gives_its_facts(tmp_path):
    path = made(tmp_path)
    got = hsfile.check(path, IDS, 4)
    assert (got.tokens, got.layers, got.hidden, got.dtype) == (3, 4, 8, "BF16")
    assert got.bytes == path.stat().st_size
    assert hsfile.check(path, IDS).layers == 4  # no layer count asked: the file's


@pytest.mark.parametrize("cut", [1, 7, 20, -1])
def test_a_torn_file_does_not_count(tmp_path, cut):
    path = made(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:cut] if cut > 0 else data[:cut])
    with pytest.raises(hsfile.BadFile, match="torn|shorter|unreadable"):
        hsfile.check(path, IDS, 4)


def test_other_token_ids_or_shape_do_not_count(tmp_path):
    path = made(tmp_path)
    with pytest.raises(hsfile.BadFile, match="token 1: 12, the row has 99"):
        hsfile.check(path, [11, 99, 13], 4)
    with pytest.raises(hsfile.BadFile, match="3 tokens, the row has 4"):
        hsfile.check(path, [*IDS, 14], 4)
    with pytest.raises(hsfile.BadFile, match=r"shape \[3, 4, 8\], expected \[3, 3,"):
        hsfile.check(path, IDS, 3)


# (dtype, the bytes of +inf little-endian, of a NaN)
NON_FINITE = [
    ("BF16", b"\x80\x7f", b"\xc1\xff"),
    ("F16", b"\x00\x7c", b"\x01\xfe"),
    ("F32", struct.pack("<f", float("inf")), struct.pack("<f", float("nan"))),
    ("F64", struct.pack("<d", float("-inf")), struct.pack("<d", float("nan"))),
]


@pytest.mark.parametrize("dtype,inf,nan", NON_FINITE)
def test_an_inf_or_nan_is_found_at_its_token(tmp_path, dtype, inf, nan, checker, monkeypatch):
    width = hsfile.dtype_bytes(dtype)
    per_token = 4 * 8 * width
    for bad in (inf, nan):
        raw = finite(3, 4, 8, width)
        at = 2 * per_token + 5 * width  # token 2, its sixth value
        raw[at : at + width] = bad
        path = made(tmp_path, dtype, raw=raw)
        with pytest.raises(hsfile.BadFile, match="non-finite value .* at token 2"):
            hsfile.check(path, IDS, 4)
    # one past a chunk: the chunks are joined where they meet
    monkeypatch.setattr(hsfile, "_CHUNK", per_token)
    raw = finite(3, 4, 8, width)
    raw[per_token : per_token + width] = nan
    with pytest.raises(hsfile.BadFile, match="at token 1"):
        hsfile.check(made(tmp_path, dtype, raw=raw), IDS, 4)
    # the largest finite value of the type counts: only an all-ones exponent is refused
    largest = {"BF16": b"\x7f\x7f", "F16": b"\xff\x7b"}.get(dtype)
    if largest:
        raw = finite(3, 4, 8, width)
        raw[0:2] = largest
        assert hsfile.check(made(tmp_path, dtype, raw=raw), IDS, 4).tokens == 3


def test_a_file_is_written_once_its_lock_is_free(tmp_path):
    path = made(tmp_path)
    assert hsfile.written(path)  # no lock file: nobody writes it
    fd = os.open(hsfile.lock_path(path), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the server's writer holds it while it writes
    try:
        assert not hsfile.written(path)
    finally:
        os.close(fd)
    assert hsfile.written(path)
