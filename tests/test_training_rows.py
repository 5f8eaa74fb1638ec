"""The training rows, piece by piece, from records real vLLM made (tests/fixtures/real_vllm_records.jsonl:
the trainers' tier's run of the tiny model, kept): the assertions the real-engine tier proves with
SpecForge's and speculators' own code, here without the trainers. SpecForge trains every assistant
span of a conversation row (the last only with train_only_last_turn), so a row may hold only the
target's replies where it trains them; pre-tokenized rows carry loss on exactly the reply's tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploytool.errors import DeployToolError
from deploytool.ops.export import Source, effective_drop, export
from deploytool.ops.formats import specforge_cut
from tests.helpers.training_rows import assistant_turns, generated

FIXTURE = Path(__file__).parent / "fixtures" / "real_vllm_records.jsonl"
RECS = [json.loads(x) for x in FIXTURE.read_text().splitlines()]
BY_ID = {r["id"]: r for r in RECS}


def sources(tmp_path, recs=RECS) -> list[Source]:
    out = []
    for ds in dict.fromkeys(r["dataset"] for r in recs):
        path = tmp_path / "pulled" / f"{ds}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in recs if r["dataset"] == ds))
        out.append(Source("h", ds, path, {"model": "tiny"}))
    return out


def rows(tmp_path, name: str, **kw) -> tuple[list[dict], object]:
    res = export(sources(tmp_path), tmp_path / name, **kw)
    return [json.loads(x) for x in (tmp_path / name).read_text().splitlines()], res


def test_fixture_holds_each_kind_of_record():
    assert {r["dataset"] for r in RECS} == {"B1", "SY", "MT", "HL", "CUT"}
    assert BY_ID["CUT-000000"]["conversations"][-1]["content"] == ""  # cut inside its thinking
    assert BY_ID["HL-000005"]["conversations"][1]["tool_calls"]  # a tool call in the history
    assert specforge_cut(BY_ID["SY-000005"]["conversations"])  # system right before the answer


def test_whole_rows_hold_only_the_targets_replies(tmp_path):
    out, res = rows(tmp_path, "sf.jsonl", fmt="specforge", per_turn=False)
    assert {r["id"] for r in out} == {
        "B1-000000",
        "B1-000001",
        "SY-000000",
        "MT-000000",
        "MT-000001",
    }
    assert res.datasets["HL"]["dropped"] == {"original_answers": 2}
    assert res.datasets["SY"]["dropped"] == {"role_order": 1}
    assert res.datasets["CUT"]["dropped"] == {"empty": 1}
    for row in out:
        trained = [m for m in row["conversations"] if m["role"] == "assistant"]
        assert trained == generated(BY_ID[row["id"]])  # every assistant span is the target's
        assert specforge_cut(row["conversations"]) is None  # SpecForge's parser keeps it whole


def test_the_default_trains_every_reply_not_cut_exactly_once(tmp_path):
    out, res = rows(tmp_path, "d.jsonl", fmt="specforge")
    assert res.per_turn and res.per_turn_why.startswith("HL's conversations hold")
    assert res.records == len(RECS)
    want = [
        (r["id"], t)
        for r in RECS
        for m, t in zip(generated(r), assistant_turns(r))
        if m["content"].strip() and not specforge_cut(r["conversations"])
    ]
    assert sorted((row["source_id"], row["assistant_turn_index"]) for row in out) == sorted(want)
    # without such a conversation, whole rows are the default
    plain = [r for r in RECS if r["dataset"] != "HL"]
    res = export(sources(tmp_path, plain), tmp_path / "w.jsonl", fmt="specforge")
    assert not res.per_turn and res.per_turn_why is None


def test_per_turn_rows_train_only_their_last_reply_the_targets(tmp_path):
    out, res = rows(tmp_path, "pt.jsonl", fmt="specforge", per_turn=True)
    assert len(out) == 2 + 1 + 3 + 3 + 2  # B1, SY (less the cut one), MT's turns, HL
    for row in out:
        rec = BY_ID[row["source_id"]]
        assert row["conversations"][-1] in generated(rec)
        assert row["conversations"] == rec["conversations"][: len(row["conversations"])]
        # SpecForge's expansion's fields: the reply's place among the row's assistant turns
        k = sum(m["role"] == "assistant" for m in row["conversations"]) - 1
        assert row["assistant_turn_index"] == k and row["id"] == f"{rec['id']}#turn{k}"
        assert row["source_row_index"] == rec["index"] and row["status"] == "success"
    # HL's replies come after the dataset's own answers: those count, as in SpecForge's expansion
    hl = {r["source_id"]: r["assistant_turn_index"] for r in out if r["source_id"].startswith("HL")}
    assert hl == {"HL-000000": 2, "HL-000005": 1}
    tool = next(r for r in out if r["source_id"] == "HL-000005")
    assert [m["role"] for m in tool["conversations"]] == ["user", "assistant", "tool", "user"] + [
        "assistant"
    ]
    assert tool["conversations"][2] == BY_ID["HL-000005"]["conversations"][2]  # id and name kept


def test_pretokenized_rows_are_the_exact_tokens_of_each_reply(tmp_path):
    out, res = rows(tmp_path, "sp.jsonl", fmt="speculators")
    assert res.dropped == 1 and res.datasets["CUT"]["dropped"] == {"empty": 1}
    assert len(out) == sum(len(generated(r)) for r in RECS) - 1
    for row in out:
        rec = BY_ID[row["primary_id"]]
        k = int(row["id"].rsplit("_gen", 1)[1])
        gen = rec["turns"][k] if "turns" in rec else rec
        n = len(gen["prompt_token_ids"])
        assert row["input_ids"] == gen["prompt_token_ids"] + gen["token_ids"]
        assert row["loss_mask"] == [0] * n + [1] * len(gen["token_ids"])
        assert row["conversations"][-1] == generated(rec)[k]  # the turn its tokens hold
        assert row["metadata"]["is_tool_call"] is False
    # the reply cut inside its thinking is the model's own tokens: kept when asked
    kept, res = rows(
        tmp_path,
        "sp2.jsonl",
        fmt="speculators",
        drop=effective_drop("speculators", False, None, "empty"),
    )
    assert len(kept) == len(out) + 1 and res.dropped == 0


def test_kept_on_demand_and_said_in_the_manifest(tmp_path):
    keep = effective_drop("specforge", False, keep="original_answers,role_order,empty")
    out, res = rows(tmp_path, "all.jsonl", fmt="specforge", drop=keep, per_turn=False)
    assert keep == ("length", "beyond_cap") and res.datasets["CUT"]["dropped"] == {"length": 1}
    assert len(out) == len(RECS) - 1
    manifest = json.loads((tmp_path / "all.jsonl.manifest.json").read_text())
    assert list(manifest["drop"]) == ["length", "beyond_cap"]
    assert "max_tokens" in manifest["drop"]["length"]
    sg, _ = rows(tmp_path, "sg.jsonl", fmt="sharegpt")
    sf = {r["id"] for r in rows(tmp_path, "sf.jsonl", fmt="specforge", per_turn=False)[0]}
    assert {r["id"] for r in sg} == sf | {"SY-000005"}  # SpecForge's role rules are its own
    with pytest.raises(DeployToolError, match="--keep: unknown reason nope"):
        effective_drop("specforge", False, keep="nope")


def test_a_tool_call_and_its_answer_stay_paired_from_the_prompt_file():
    from remote.job.store.prompts import to_messages

    convo = [
        {"role": "user", "content": "add"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function"}]},
        {"role": "tool", "content": "5", "tool_call_id": "c1", "name": "add"},
        {"role": "user", "content": "so?"},
    ]
    msgs = to_messages({"conversations": convo})
    assert msgs == convo  # sent to the server and recorded as the dataset has them


def test_a_datasets_thinking_under_vllms_input_name_is_the_trainers_field():
    from deploytool.ops.formats import message

    m = {"role": "assistant", "content": "4", "reasoning": "2+2", "weight": 0}
    assert message(m) == {"role": "assistant", "content": "4", "reasoning_content": "2+2"}
    assert message({"role": "user", "content": "q", "reasoning_content": "x"}) == {
        "role": "user",
        "content": "q",
    }
