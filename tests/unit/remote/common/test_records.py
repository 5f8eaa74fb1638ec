"""The output record, typed: written by the job, read back by export, report and anyone, field by
field as docs/records.md lists them; real vLLM's records read back to the same bytes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from remote.common.records import ErrorLine, Record, Reply, RowLine

REPO = Path(__file__).resolve().parents[4]
FIXTURE = REPO / "tests" / "fixtures" / "real_vllm_records.jsonl"


def _reply(text: str, finish: str = "stop", **kw) -> Reply:
    return Reply(text, "hm", finish, 5, 7, "m", **kw)


def _one() -> Record:
    r = _reply("a", prompt_token_ids=[1, 2], token_ids=[3, 4], continued=2)
    rec = Record.one("B1", "B1-000003", 3, [{"role": "user", "content": "q"}], r)
    rec.release = "abc123"
    return rec


def _conversation() -> Record:
    turns = [[{"role": "user", "content": "q0"}], [{"role": "user", "content": "q1"}]]
    replies = [_reply("a0", token_ids=[5], prompt_token_ids=[1]), _reply("a1", "length")]
    return Record.conversation(
        "MT",
        "MT-1",
        1,
        turns + [[{"role": "user", "content": "q2"}]],
        replies,
        stopped="cut at max_tokens",
    )


def test_a_one_turn_record_keeps_its_reply_at_the_top():
    d = _one().to_json()
    assert d["conversations"][-1] == {
        "role": "assistant",
        "content": "a",
        "reasoning_content": "hm",
    }
    assert (d["finish_reason"], d["usage"]) == (
        "stop",
        {"prompt_tokens": 5, "completion_tokens": 7},
    )
    assert (d["prompt_token_ids"], d["token_ids"], d["continued"]) == ([1, 2], [3, 4], 2)
    assert d["release"] == "abc123" and "turns" not in d
    assert _one().completion_tokens == 7


def test_a_conversation_sums_its_turns_and_keeps_each_replys_tokens():
    rec = _conversation()
    d = rec.to_json()
    assert (d["turns_done"], d["turns_total"], d["finish_reason"]) == (2, 3, "length")
    assert d["usage"] == {"prompt_tokens": 10, "completion_tokens": 14}
    assert d["turns"][0]["token_ids"] == [5] and "token_ids" not in d["turns"][1]
    assert "token_ids" not in d  # the last reply has none
    assert [m["role"] for m in d["conversations"]] == ["user", "assistant"] * 2
    assert rec.completion_tokens == 14 and [t.finish_reason for t in rec.generations()] == [
        "stop",
        "length",
    ]


def test_every_record_reads_back_to_itself():
    for rec in (_one(), _conversation()):
        d = rec.to_json()
        assert Record.from_json(json.loads(json.dumps(d))).to_json() == d
    lines = FIXTURE.read_text().splitlines()
    assert {json.loads(x)["dataset"] for x in lines} == {"B1", "SY", "MT", "HL", "CUT"}
    for line in lines:  # records real vLLM made, one-turn and turns: all
        d = json.loads(line)
        assert Record.from_json(d).to_json() == d


def test_a_reply_reads_back_from_the_sidecar():
    r = _reply("a", token_ids=[3], prompt_token_ids=[1], continued=1)
    assert Reply.from_json(json.loads(json.dumps(r.to_json()))) == r
    assert r.message("reasoning") == {"role": "assistant", "content": "a", "reasoning": "hm"}


def test_the_records_page_lists_every_field_a_record_has():
    page = (REPO / "docs" / "records.md").read_text()
    listed = set(re.findall(r"^\| `(\w+)` \|", page, re.M))
    made = set(_one().to_json()) | set(_conversation().to_json())
    assert listed == made, (listed - made, made - listed)
    turn_fields = set().union(*(t.to_json() for t in _one().generations()))
    turn_line = next(ln for ln in page.splitlines() if ln.startswith("| `turns` |"))
    assert all(f"`{k}`" in turn_line for k in turn_fields)


def _row(**kw) -> RowLine:
    fields = dict(n=3, id="B1-7_gen0", record="B1-7", turn=0, input_ids=[5, 6, 7, 8, 9],
                  loss_mask=[0, 0, 1, 1, 1], seq_len=5, tokens=5, layers=4, hidden=2,
                  dtype="BF16", bytes=160, t=1_700_000_000)  # fmt: skip
    return RowLine(**{**fields, **kw})


def test_a_row_line_reads_back_its_facts_and_not_its_tokens():
    raw = _row().line()
    assert json.loads(raw)["input_ids"] == [5, 6, 7, 8, 9]  # the trainer's fields, as it reads them
    assert RowLine.parse(raw) == _row(input_ids=None, loss_mask=None)
    assert RowLine.trained(raw) == 3
    older = json.dumps({k: v for k, v in json.loads(raw).items() if k != "t"}).encode() + b"\n"
    assert RowLine.parse(older).t is None and RowLine.parse(older).bytes == 160
    # another release's line: what counting a row takes is there, the rest is not, or is otherwise
    other = {k: v for k, v in json.loads(raw).items() if k not in ("record", "turn", "seq_len")}
    other = json.dumps(dict(other, t=1_700_000_000.5, new_field=[1])).encode() + b"\n"
    assert RowLine.parse(other).bytes == 160 and RowLine.parse(other).t == 1_700_000_000.5
    resorted = json.dumps(json.loads(raw), sort_keys=True, indent=None).encode() + b"\n"
    assert RowLine.parse(resorted) == RowLine.parse(raw) and RowLine.trained(resorted) == 3
    with pytest.raises(ValueError, match="torn"):
        RowLine.parse(raw[:-1])
    for bad in (raw.replace(b'"bytes":160', b'"bytes":"160"'), raw.replace(b'"n":3,', b"")):
        with pytest.raises(ValueError, match="not a row"):
            RowLine.parse(bad)


def test_the_hidden_states_page_lists_a_row_lines_fields_in_order():
    page = (REPO / "docs" / "hidden-states.md").read_text()
    section = page[page.index("A line of `rows.jsonl`") :].split("\n\n")[0]
    assert re.findall(r"`(\w+)`", section) == list(_row().to_dict())


def test_the_records_page_lists_an_error_lines_fields_and_a_line_reads_back():
    page = (REPO / "docs" / "records.md").read_text()
    section = page[page.index("`<DS>.errors.jsonl` instead") :].split(")")[0]
    line = ErrorLine("B1-000004", "B1", 4, "gave up after 8 attempts: 500", 8, 1_700_000_000)
    assert re.findall(r"`(\w+)`", section) == list(line.to_dict())
    assert json.loads(line.line()) == line.to_dict()


def test_the_files_to_pull_come_in_the_jobs_dataset_order_not_by_name(tmp_path):
    """B10 after B2 (by name it came after B1), a job of Z, A in its own order; files no dataset
    of the job names come last, by name."""
    from remote.common.jobspec import Paths
    from remote.common.records import output_files

    paths = Paths(tmp_path)
    paths.outputs.mkdir(parents=True)
    for name in ("B10.jsonl", "B2.jsonl", "B1.jsonl", "B1.meta.json", "B10.errors.jsonl"):
        (paths.outputs / name).write_text("{}\n")
    (paths.outputs / "old.jsonl").write_text("{}\n")
    (paths.outputs / "B1.jsonl.idx").write_text("")  # never pulled
    assert list(output_files(paths, {}, ["B1", "B2", "B10"])) == [
        "B1.jsonl",
        "B1.meta.json",
        "B2.jsonl",
        "B10.errors.jsonl",
        "B10.jsonl",
        "old.jsonl",
    ]
    files = list(output_files(paths, {}, ["B10", "B2"]))
    assert files[:3] == ["B10.errors.jsonl", "B10.jsonl", "B2.jsonl"]
    assert files[3:] == ["B1.jsonl", "B1.meta.json", "old.jsonl"]
