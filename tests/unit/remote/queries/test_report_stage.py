"""The report's part for the hidden-states stage, read from the ledger the stage's own store writes:
rows, tokens, trained tokens, bytes and what pull freed; a torn last line is not a row."""

from __future__ import annotations

import collections

from remote.common.records import TokenRow
from remote.common.stages import HIDDEN_STATES
from remote.common.status import DatasetStatus, JobStatus
from remote.job.hidden.hsfile import Checked
from remote.job.hidden.store import FREED, HiddenStore
from remote.queries.report_stage import scan_rows, stage_of


def made_rows(root, n: int, prompt: int = 3, reply: int = 5) -> HiddenStore:
    """n rows committed by the stage's store, each file `(prompt + reply) * 16` bytes."""
    store = HiddenStore(root, "B1", log=lambda *_: None).open()
    for i in range(n):
        row = TokenRow(f"B1-{i}_gen0", f"B1-{i}", 0, [7] * prompt, [11] * reply)
        src = root / f"in-{i}"
        size = (prompt + reply) * 16
        src.write_bytes(b"\0" * size)
        store.commit(row, src, Checked(prompt + reply, 4, 2, "bfloat16", size))
    store.close()
    return store


def test_rows_tokens_trained_tokens_and_bytes_are_the_ledgers(tmp_path):
    made_rows(tmp_path, 3)
    made = collections.Counter()
    got, lengths = scan_rows(tmp_path / "B1", made)
    assert (got.rows, got.tokens, got.trained, got.bytes) == (3, 24, 15, 3 * 8 * 16)
    assert (got.layers, got.hidden, got.dtype) == (4, 2, "bfloat16")
    assert lengths == [8, 8, 8] and sum(made.values()) == 24  # each row at the second it counted
    assert got.freed == 0 and got.on_host == got.bytes


def test_a_torn_last_line_is_not_a_row_and_freed_rows_are_off_the_host(tmp_path):
    made_rows(tmp_path, 3)
    ledger = tmp_path / "B1" / "rows.jsonl"
    data = ledger.read_bytes()
    ledger.write_bytes(data + data.splitlines(keepends=True)[0][:40])  # a kill mid-write
    (tmp_path / "B1" / FREED).write_text('{"n": 0, "bytes": 128}\n{"n": 1, "by')
    got, _ = scan_rows(tmp_path / "B1", collections.Counter())
    assert got.rows == 3
    assert (got.freed, got.freed_bytes, got.on_host) == (1, 128, 2 * 128)


def test_only_datasets_with_rows_are_shown_and_the_stages_targets_only_while_it_runs(tmp_path):
    made_rows(tmp_path, 2)
    st = JobStatus(datasets={"B1": DatasetStatus(target=5, errors=1)})
    shown, _ = stage_of(tmp_path, ["B1", "B2"], st)
    assert list(shown) == ["B1"] and shown["B1"][0].target is None  # generation's target, not rows
    st.stage = HIDDEN_STATES
    shown, _ = stage_of(tmp_path, ["B1", "B2"], st)
    assert (shown["B1"][0].target, shown["B1"][0].failed) == (5, 1)
