"""The stage's rows of a dataset: every reply of the records among the first N prompts, with the
record's own token ids; a record seen twice counts once; one kept without ids is told apart."""

from __future__ import annotations

import json

from remote.common.caps import Target
from remote.common.records import Record, Reply
from remote.job.hidden.rows import rows_of


def record(i: int, ids=True) -> dict:
    reply = Reply("a", None, "stop", 3, 2, "m")
    if ids:
        reply.prompt_token_ids, reply.token_ids = [1, 2, i], [50 + i, 51]
    return Record.one("B1", f"B1-{i:06d}", i, [{"role": "user", "content": "q"}], reply).to_json()


def test_rows_are_the_records_tokens_inside_the_cap(tmp_path):
    out = tmp_path / "B1.jsonl"
    lines = [record(0), record(1), record(0), record(2, ids=False), record(3)]
    out.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"id": "B1-00')
    got = rows_of(out, Target(3))
    assert [r.id for r in got.rows] == ["B1-000000_gen0", "B1-000001_gen0"]
    assert got.rows[1].input_ids == [1, 2, 1, 51, 51] and got.rows[1].loss_mask == [0, 0, 0, 1, 1]
    assert got.untokened == 1
    assert [r.id for r in rows_of(out, Target()).rows][-1] == "B1-000003_gen0"
    assert rows_of(tmp_path / "none.jsonl", Target()).rows == []


def test_the_prompt_file_as_it_is_now_decides_not_the_index_a_record_was_made_at(tmp_path):
    """B1-000002 was made at index 2; the file now has it at 9, past the cap of 3: the runner counts
    it beyond, so it makes no row (and B1-000003, made at 3, is now among the first three)."""
    out = tmp_path / "B1.jsonl"
    out.write_text("".join(json.dumps(record(i)) + "\n" for i in range(4)))
    now = Target(3, frozenset({"B1-000000", "B1-000001", "B1-000003"}))
    got = rows_of(out, now)
    assert [r.id for r in got.rows] == ["B1-000000_gen0", "B1-000001_gen0", "B1-000003_gen0"]
