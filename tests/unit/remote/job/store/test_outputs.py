"""The output files: a torn last line cut aside (never destroyed), the sidecar index trusted only when
it matches, one whole line per append or nothing on a full disk."""

from __future__ import annotations

import errno
import json

import pytest

from remote.job.store import outputs
from remote.job.store.outputs import (
    AppendFile,
    DiskFull,
    encode_record,
    index_path,
    load_existing,
    repair_tail,
)


def rec(i: int, tokens: int = 10) -> dict:
    return {
        "id": f"B1-{i:06d}",
        "dataset": "B1",
        "index": i,
        "finish_reason": "stop",
        "usage": {"completion_tokens": tokens},
        "response": "x" * i,
    }


def write(path, n: int) -> None:
    f = AppendFile(path, indexed=True)
    for i in range(n):
        f.append(encode_record(rec(i, tokens=i + 1)), rid=f"B1-{i:06d}", tokens=i + 1)
    f.close()


def finished(ex, reason: str) -> int:
    return sum(1 for f in ex.finish.values() if f == reason)


def test_the_header_comes_first_whatever_order_the_record_has():
    fields = rec(3)
    del fields["response"]
    line = encode_record({"response": "r", **fields})
    assert line.endswith(b"\n") and line.startswith(b'{"id": "B1-000003", "dataset": "B1"')
    assert json.loads(line)["response"] == "r"


def test_a_torn_last_line_goes_to_the_torn_file(tmp_path):
    path = tmp_path / "B1.jsonl"
    write(path, 3)
    whole = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"id": "B1-000003", "datas')
    assert repair_tail(path) == len(b'{"id": "B1-000003", "datas')
    assert path.read_bytes() == whole
    assert (tmp_path / "B1.jsonl.torn").read_bytes() == b'{"id": "B1-000003", "datas\n'
    assert repair_tail(path) == 0 and repair_tail(tmp_path / "none.jsonl") == 0


def test_a_complete_line_that_is_not_json_is_cut_too(tmp_path):
    path = tmp_path / "B1.jsonl"
    write(path, 2)
    with open(path, "ab") as f:
        f.write(b"not json\n")
    assert repair_tail(path) == len(b"not json\n")
    assert load_existing(path).lines == 2


def test_the_index_is_read_then_only_the_rest_of_the_file_scanned(tmp_path):
    path = tmp_path / "B1.jsonl"
    write(path, 5)
    ex = load_existing(path)
    assert ex.ids == {f"B1-{i:06d}" for i in range(5)}
    assert ex.tokens["B1-000004"] == 5 and (ex.lines, ex.duplicates) == (5, 0)
    with open(path, "ab") as f:  # a record the index does not have yet (crash between the two)
        f.write(encode_record(rec(5, tokens=6)))
    assert load_existing(path).tokens["B1-000005"] == 6
    assert index_path(path).read_text().count("\n") == 6  # completed from the file


def test_an_index_that_does_not_match_is_rebuilt(tmp_path):
    path = tmp_path / "B1.jsonl"
    write(path, 4)
    index_path(path).write_text(index_path(path).read_text().replace("B1-000003", "B1-999999"))
    logged = []
    ex = load_existing(path, log=logged.append)
    assert "B1-000003" in ex.ids and "B1-999999" not in ex.ids
    assert logged and "rebuilding the index" in logged[0]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_an_index_that_matches_is_kept_however_few_its_records(tmp_path, n):
    """A dataset of one or two records had its index rebuilt at every start, the log saying
    `its index does not match it` of an index that matched byte for byte."""
    path = tmp_path / "B1.jsonl"
    write(path, n)
    load_existing(path)  # the index written
    logged = []
    assert len(load_existing(path, log=logged.append).ids) == n and not logged


def test_the_finish_reason_of_every_record_is_known_from_the_index_and_the_file(tmp_path):
    path = tmp_path / "B1.jsonl"
    f = AppendFile(path, indexed=True)
    for i, finish in enumerate(["stop", "length", None, "length"]):
        line = encode_record(dict(rec(i), finish_reason=finish))
        f.append(line, rid=f"B1-{i:06d}", tokens=1, finish=finish or "null")
    f.close()
    with open(path, "ab") as out:  # past the index: read from the file itself
        out.write(encode_record(dict(rec(4), finish_reason="length")))
    ex = load_existing(path)
    assert finished(ex, "length") == 3 and finished(ex, "stop") == 1
    assert ex.finish["B1-000002"] == "null"
    # an older release's index (three fields a line) is rebuilt from the file, finishes included
    old = b"".join(
        line.rsplit(b"\t", 1)[0] + b"\n" for line in index_path(path).read_bytes().splitlines()
    )
    index_path(path).write_bytes(old)
    assert finished(load_existing(path), "length") == 3
    assert index_path(path).read_text().splitlines()[1].endswith("\tlength")
    # lines another program wrote (keys in another order) are parsed one by one
    other = tmp_path / "B2.jsonl"
    other.write_text(json.dumps({"finish_reason": "length", "id": "x", "usage": {}}) + "\n")
    assert finished(load_existing(other), "length") == 1


def test_a_duplicate_is_counted_not_hidden(tmp_path):
    path = tmp_path / "B1.jsonl"
    write(path, 2)
    with open(path, "ab") as f:
        f.write(encode_record(rec(1)))
    ex = load_existing(path, update_index=False)
    assert (ex.lines, len(ex.ids), ex.duplicates) == (3, 2, 1)


def test_a_full_disk_leaves_no_part_of_the_line(tmp_path, monkeypatch):
    path = tmp_path / "B1.jsonl"
    f = AppendFile(path)
    f.append(b"first\n")
    real_write, calls = outputs.os.write, []

    def half_then_full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:3]))  # a part of the line made it
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outputs.os, "write", half_then_full)
    with pytest.raises(DiskFull, match="No space left"):
        f.append(b"second line\n")
    monkeypatch.undo()
    f.append(b"third\n")
    f.close()
    assert path.read_bytes() == b"first\nthird\n"


def test_a_file_that_need_only_outlive_its_process_is_never_fsynced(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(outputs.os, "fsync", synced.append)
    durable, cache = (
        AppendFile(tmp_path / "a.jsonl"),
        AppendFile(tmp_path / "b.jsonl", durable=False),
    )
    for f in (durable, cache):
        f.append(b"line\n")
        f.sync()
        f.close()
    assert synced == [durable.fd]  # the durable one only
    assert (tmp_path / "b.jsonl").read_bytes() == b"line\n"
