"""The stage's rows of a dataset: every reply of the records among the first N prompts, with the
record's own token ids; a record seen twice counts once; one kept without ids is told apart."""

from __future__ import annotations

import json

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
    got = rows_of(out, 3)
    assert [r.id for r in got.rows] == ["B1-000000_gen0", "B1-000001_gen0"]
    assert got.rows[1].input_ids == [1, 2, 1, 51, 51] and got.rows[1].loss_mask == [0, 0, 0, 1, 1]
    assert got.untokened == 1
    assert [r.id for r in rows_of(out, None).rows][-1] == "B1-000003_gen0"
    assert rows_of(tmp_path / "none.jsonl", None).rows == []
