"""Whole conversations: each turn's request carries the replies before it, a cut reply ends the
conversation, and the sidecar of finished turns survives a restart only for unchanged prompts."""

from __future__ import annotations

from remote.common.records import Record, Reply
from remote.job.store.conversation import Partials, finished, request
from remote.job.store.prompts import Prompt

SYSTEM = {"role": "system", "content": "be brief"}


def convo(pid: str = "MT-000000", questions=("q0", "q1", "q2")) -> Prompt:
    turns = [[SYSTEM, {"role": "user", "content": questions[0]}]]
    turns += [[{"role": "user", "content": q}] for q in questions[1:]]
    return Prompt(id=pid, index=0, messages=turns[0], turns=turns)


def reply(text: str, finish: str = "stop", think: str | None = "hm", **ids) -> Reply:
    return Reply(text, think, finish, 5, 7, "m", **ids)


def test_turn_k_asks_with_the_replies_before_it_thinking_as_reasoning():
    p = convo()
    assert request(p, []) == [SYSTEM, {"role": "user", "content": "q0"}]
    msgs = request(p, [reply("a0")])
    assert msgs[2] == {"role": "assistant", "content": "a0", "reasoning": "hm"}
    assert msgs[3] == {"role": "user", "content": "q1"}
    assert request(p, [reply("a0", think=None)])[2] == {"role": "assistant", "content": "a0"}


def test_finished_when_every_turn_is_answered_or_one_is_cut():
    p = convo()
    assert not finished(p, []) and not finished(p, [reply("a0")])
    assert finished(p, [reply("a0", finish="length")])
    assert finished(p, [reply("a0"), reply("a1"), reply("a2")])


def test_one_record_sums_the_turns_and_keeps_the_last_tokens():
    p = convo()
    last = reply("a1", finish="length", prompt_token_ids=[1, 2], token_ids=[3])
    replies = [reply("a0"), last]
    rec = Record.conversation("MT", p.id, p.index, p.turns, replies, "cut at max_tokens").to_json()
    assert rec["usage"] == {"prompt_tokens": 10, "completion_tokens": 14}
    assert (rec["turns_done"], rec["turns_total"], rec["finish_reason"]) == (2, 3, "length")
    assert rec["conversations"][2] == {
        "role": "assistant",
        "content": "a0",
        "reasoning_content": "hm",
    }
    assert rec["token_ids"] == [3] and rec["stopped"] == "cut at max_tokens"
    assert rec["turns"][1]["token_ids"] == [3] and "token_ids" not in rec["turns"][0]


def test_finished_turns_come_back_after_a_restart_unless_recorded_or_changed(tmp_path):
    path = tmp_path / "MT.partial.jsonl"
    side = Partials(path, done=set())
    a, b = convo("MT-000000"), convo("MT-000001")
    side.add(a, 0, reply("a0"))
    side.add(a, 1, reply("a1"))
    side.add(b, 0, reply("b0"))
    side.close()
    with open(path, "ab") as f:
        f.write(b'{"id": "MT-000000", "tu')  # torn by a crash
    again = Partials(path, done={"MT-000001"})  # b was recorded meanwhile
    assert [r.content for r in again.replies(a)] == ["a0", "a1"]
    assert again.replies(b) == []
    assert again.replies(convo("MT-000000", ("other", "q1", "q2"))) == []  # its prompt changed
    again.add(a, 1, reply("a1 again"))  # a turn answered again replaces the old one
    assert [r.content for r in again.replies(a)] == ["a0", "a1 again"]
    again.close()
    assert "MT-000001" not in path.read_text()  # rewritten at open with what is still missing
