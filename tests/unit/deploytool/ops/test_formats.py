"""A record's rows in each trainer's format, from hand-made records: only the target's replies carry
loss, per-turn rows carry the fields SpecForge's own expansion writes."""

from __future__ import annotations

import pytest

from deploytool.ops.formats import (
    NoTokenIds,
    message,
    pieces,
    sharegpt,
    specforge,
    specforge_cut,
    speculators,
)
from remote.common.records import Record


def _conversation() -> Record:
    """turns: last after a history with the dataset's own answer and a tool call."""
    return Record.from_json(
        {
            "id": "HL-7",
            "index": 7,
            "conversations": [
                {"role": "system", "content": "be brief", "extra": "not the trainer's"},
                {"role": "user", "content": "q1"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}]},
                {"role": "tool", "content": "42", "tool_call_id": "c1"},
                {"role": "user", "content": "q2"},
                {"role": "assistant", "content": "a2", "reasoning_content": "think"},
            ],
            "finish_reason": "stop",
            "prompt_token_ids": [1, 2, 3],
            "token_ids": [7, 8],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        }
    )


def test_a_one_turn_record_is_one_reply_its_last_and_the_history_is_not_the_targets():
    rec = _conversation()
    (piece,) = pieces(rec, per_reply=True)
    assert piece.replies[0][0] == 5 and piece.originals() == 0  # last only: nothing else trained
    (whole,) = pieces(rec, per_reply=False)
    assert whole.originals() == 1  # a whole row would train the dataset's tool-call answer


def test_a_per_turn_row_has_specforges_expansion_fields():
    rec = _conversation()
    (piece,) = pieces(rec, per_reply=True)
    row = specforge(rec, piece, 0)
    assert row["id"] == "HL-7#turn1" and row["assistant_turn_index"] == 1  # the dataset's counts
    assert row["source_id"] == "HL-7" and row["source_row_index"] == 7
    assert row["status"] == "success"
    assert row["conversations"][0] == {"role": "system", "content": "be brief"}  # trainer's keys
    assert row["conversations"][2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1"}],
    }
    assert row["conversations"][-1]["reasoning_content"] == "think"
    whole = specforge(rec, pieces(rec, False)[0], None)
    assert whole["id"] == "HL-7" and "assistant_turn_index" not in whole


def test_turns_all_rows_index_every_reply_in_order():
    rec = Record.from_json(
        {
            "id": "MT-1",
            "index": 1,
            "turns": [{"finish_reason": "stop"}, {"finish_reason": "stop"}],
            "conversations": [
                {"role": "user", "content": "q1"},
                {"role": "assistant", "content": "a1", "reasoning_content": "t1"},
                {"role": "user", "content": "q2"},
                {"role": "assistant", "content": "a2"},
            ],
        }
    )
    rows = [specforge(rec, p, k) for k, p in enumerate(pieces(rec, True))]
    assert [r["id"] for r in rows] == ["MT-1#turn0", "MT-1#turn1"]
    assert rows[1]["conversations"][1]["reasoning_content"] == "t1"  # kept in history
    assert [r["id"] for r in (sharegpt(rec, p, k) for k, p in enumerate(pieces(rec, True)))] == [
        "MT-1#turn0",
        "MT-1#turn1",
    ]


def test_a_pretokenized_row_is_the_exact_tokens_with_loss_on_the_reply():
    rec = _conversation()
    (piece,) = pieces(rec, True)
    row = speculators(rec, piece, 0)
    assert row["input_ids"] == [1, 2, 3, 7, 8] and row["loss_mask"] == [0, 0, 0, 1, 1]
    assert row["id"] == "HL-7_gen0" and row["primary_id"] == "HL-7"
    assert row["metadata"]["finish_reason"] == "stop" and row["metadata"]["is_tool_call"] is False
    rec.last.token_ids = None
    with pytest.raises(NoTokenIds):
        speculators(rec, pieces(rec, True)[0], 0)


def test_sharegpt_opens_a_reply_with_its_thinking():
    rec = _conversation()
    row = sharegpt(rec, pieces(rec, False)[0], None)
    assert [t["from"] for t in row["conversations"]][:3] == ["system", "human", "gpt"]
    assert row["conversations"][-1]["value"] == "<think>\nthink\n</think>\n\na2"


@pytest.mark.parametrize(
    "roles, cut",
    [
        (["system", "user", "assistant"], None),
        (["user", "assistant", "tool", "assistant"], None),
        (["assistant", "user"], "assistant before the first user turn"),
        (["user", "system", "assistant"], "an assistant reply right after a system message"),
        (["user", "tool"], "a tool message right after a user message"),
    ],
)
def test_where_specforges_parser_would_cut_a_conversation(roles, cut):
    assert specforge_cut([{"role": r, "content": "x"} for r in roles]) == cut


def test_a_message_keeps_the_trainers_fields_and_reads_vllms_input_name_for_thinking():
    m = message({"role": "assistant", "content": None, "reasoning": "t", "weight": 1})
    assert m == {"role": "assistant", "content": "", "reasoning_content": "t"}
    assert "reasoning_content" not in message({"role": "user", "content": "q", "reasoning": "t"})
