"""A dataset's rows and files: a row counts once its line is in rows.jsonl, whatever a kill -9 cut
off (a torn line, a file moved whose line never came, a copy cut short, a file gone)."""

from __future__ import annotations

import json

import pytest

from remote.common.records import TokenRow
from remote.job.hidden import hsfile
from remote.job.hidden.store import ROWS, HiddenStore


def row(i: int) -> TokenRow:
    return TokenRow(f"B1-{i:06d}_gen0", f"B1-{i:06d}", 0, [1, 2, i], [100 + i, 101])


def incoming(tmp_path, r: TokenRow):
    path = tmp_path / "incoming" / f"{r.id}.safetensors"
    path.parent.mkdir(exist_ok=True)
    hsfile.write(path, r.input_ids, bytes(len(r.input_ids) * 2 * 4 * 2), 2, "BF16")
    return path


def commit(store, tmp_path, i):
    r = row(i)
    path = incoming(tmp_path, r)
    return store.commit(r, path, hsfile.check(path, r.input_ids))


def filled(tmp_path, n=3) -> HiddenStore:
    store = HiddenStore(tmp_path / "hs", "B1", lambda line: None).open()
    for i in range(n):
        commit(store, tmp_path, i)
    store.close()
    return store


def reopened(tmp_path) -> tuple[HiddenStore, list[str]]:
    logged: list[str] = []
    return HiddenStore(tmp_path / "hs", "B1", logged.append).open(), logged


def test_rows_are_laid_out_as_the_trainer_reads_them_and_read_back(tmp_path):
    store = filled(tmp_path)
    lines = [json.loads(x) for x in (store.dir / ROWS).read_text().splitlines()]
    assert [x["n"] for x in lines] == [0, 1, 2]
    assert lines[1]["input_ids"] == [1, 2, 1, 101, 101] and lines[1]["loss_mask"] == [0, 0, 0, 1, 1]
    assert lines[1]["seq_len"] == 5 and lines[1]["record"] == "B1-000001"
    for x in lines:  # hs_<n> holds row n's tokens, whole
        assert hsfile.check(store.path(x["n"]), x["input_ids"]).tokens == x["seq_len"]
    again, logged = reopened(tmp_path)
    assert again.count == 3 and again.done[row(2).id] == 2 and not logged
    assert again.tokens == 15 and again.shape == (2, 4, "BF16")
    assert not list((tmp_path / "incoming").iterdir())  # moved, not copied
    with pytest.raises(ValueError, match="counted already"):
        commit(again, tmp_path, 1)


def test_a_torn_last_line_is_cut_and_its_file_made_again(tmp_path):
    store = filled(tmp_path)
    data = (store.dir / ROWS).read_bytes()
    (store.dir / ROWS).write_bytes(data[:-7])  # killed while the third line was written
    again, logged = reopened(tmp_path)
    assert again.count == 2 and row(2).id not in again.done
    assert (store.dir / ROWS).read_bytes() == data[: data.rindex(b"\n", 0, len(data) - 1) + 1]
    assert not store.path(2).exists()  # moved there, never counted: gone, made again
    assert any("torn" in s for s in logged) and any("hs_2" in s for s in logged)
    assert commit(again, tmp_path, 2) == 2  # and the row goes where it was


def test_a_file_moved_whose_line_never_came_is_dropped(tmp_path):
    store = filled(tmp_path, 2)
    stray = incoming(tmp_path, row(2))
    stray.rename(store.path(2))  # killed between the move and the line
    (store.files / ".hs_3.safetensors.tmp").write_bytes(b"half a copy")
    again, _ = reopened(tmp_path)
    assert again.count == 2 and not store.path(2).exists()
    assert not list(store.files.glob(".*.tmp"))


@pytest.mark.parametrize("harm", ["gone", "short"])
def test_a_line_whose_file_is_gone_or_short_is_made_again_with_every_row_after(tmp_path, harm):
    store = filled(tmp_path)
    if harm == "gone":
        store.path(1).unlink()
    else:
        store.path(1).write_bytes(store.path(1).read_bytes()[:-3])
    again, logged = reopened(tmp_path)
    assert again.count == 1 and list(again.done) == [row(0).id]
    assert not store.path(2).exists() and len((store.dir / ROWS).read_text().splitlines()) == 1
    assert any("hs_1" in s for s in logged)


def test_a_line_out_of_order_or_twice_ends_the_ledger_there(tmp_path):
    store = filled(tmp_path, 2)
    lines = (store.dir / ROWS).read_text().splitlines(keepends=True)
    (store.dir / ROWS).write_text(lines[0] + lines[0].replace('"n":0', '"n":1'))
    again, logged = reopened(tmp_path)
    assert again.count == 1 and any("out of order" in s for s in logged)


def test_a_line_another_release_wrote_counts_its_row_and_no_file_is_made_again(tmp_path):
    """What counting a row takes is there (n, id, the file's size and shape, tokens); the rest is
    missing, laid out otherwise or of another type: the row and every row after it stay counted."""
    store = filled(tmp_path)
    lines = (store.dir / ROWS).read_text().splitlines()
    other = {k: v for k, v in json.loads(lines[1]).items() if k not in ("record", "seq_len")}
    lines[1] = json.dumps(dict(other, t=1.5, turn=None, extra={"new": 1}), indent=None)
    (store.dir / ROWS).write_text("\n".join(lines) + "\n")
    again, logged = reopened(tmp_path)
    assert again.count == 3 and not logged and store.path(2).exists()


def test_a_rows_line_holds_every_fact_the_check_found_of_its_file():
    import dataclasses

    from remote.common.records import RowLine

    facts = [f.name for f in dataclasses.fields(hsfile.Checked)]
    assert set(facts) <= {f.name for f in dataclasses.fields(RowLine)}  # commit passes them all


def sha(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_file_freed_with_its_copys_sum_stays_counted_and_a_wrong_sum_frees_nothing(tmp_path):
    from remote.job.hidden.store import FREED, free_rows

    store = filled(tmp_path)
    sums = {0: sha(store.path(0)), 1: "0" * 64, 7: "f" * 64}
    done, size, before, refused = free_rows(tmp_path / "hs", "B1", sums)
    assert (done, before) == (1, 0) and size > 0
    assert refused == {1: "its sha256 differs from the copy's", 7: "no such file"}
    assert not store.path(0).exists() and store.path(1).exists()
    again, logged = reopened(tmp_path)
    assert again.count == 3 and not logged  # the freed row is counted without its file
    assert [json.loads(x)["n"] for x in (store.dir / FREED).read_text().splitlines()] == [0]


def test_a_free_cut_between_its_line_and_the_unlink_is_finished_by_the_next(tmp_path):
    from remote.job.hidden.store import FREED, free_rows

    store = filled(tmp_path)
    line = {"n": 2, "sha256": sha(store.path(2)), "bytes": store.path(2).stat().st_size}
    (store.dir / FREED).write_text(json.dumps(line) + "\n" + '{"n": 1, "sha')  # and a torn one
    again, logged = reopened(tmp_path)
    assert again.count == 3 and not logged  # the file still there: nothing to repair
    again.close()
    assert free_rows(tmp_path / "hs", "B1", {2: line["sha256"]})[:3] == (0, 0, 1)
    assert not store.path(2).exists()
    store.path(1).unlink()  # a row whose file is gone and was never freed is made again
    third, logged = reopened(tmp_path)
    assert third.count == 1 and "hs_1.safetensors is gone" in logged[0]
    assert [json.loads(x)["n"] for x in (store.dir / FREED).read_text().splitlines()] == []


def test_a_move_across_filesystems_is_a_whole_copy_then_the_source_removed(tmp_path, monkeypatch):
    import errno
    import os

    from remote.job.hidden import store

    source, dest = tmp_path / "in.safetensors", tmp_path / "files" / "hs_0.safetensors"
    dest.parent.mkdir()
    source.write_bytes(b"x" * 100_000)
    real = os.replace

    def replace(a, b):
        if a == source:  # the rename a second filesystem refuses
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(a, b)

    monkeypatch.setattr(store.os, "replace", replace)
    store._move(source, dest)
    assert dest.read_bytes() == b"x" * 100_000 and not source.exists()
    assert [p.name for p in dest.parent.iterdir()] == ["hs_0.safetensors"]  # no temp file left
