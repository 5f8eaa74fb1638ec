"""Records -> the rows each trainer reads, as its released code reads them (SpecForge 0.2.0,
speculators 0.9.0). Only tokens the target model generated may carry loss, so a row is built from a
`Piece`: the messages it holds and which of them are the target's replies.

- specforge: `{"id", "conversations": [{role, content, reasoning_content?, tool_calls?, …}]}` for
  SpecForge's `data.train_data_path`. SpecForge renders them with the chat template and puts loss on
  every assistant span (`train_only_last_turn`: the last only): a whole row may hold only the
  target's replies. `per_turn`: one row per reply, the turns before it as its history, for
  `train_only_last_turn: true`, with the fields SpecForge's own expansion writes (`<id>#turn<k>`,
  `source_id`, `source_row_index`, `assistant_turn_index` k: the reply's place among the row's
  assistant turns). A reply's thinking stays in history too (SpecForge's expansion drops it): the
  template decides whether it is rendered, as vLLM's did when the reply was asked for.
- speculators: one row per reply, `input_ids` = the prompt's token ids + the reply's, `loss_mask` 0
  over the prompt and 1 over the reply (`<id>_gen<k>`, `primary_id`, as speculators' response
  regeneration writes them). `speculators prepare-data` passes such rows through, and SpecForge reads
  the same file as pre-tokenized (`data.prompts_path`): the exact tokens, whatever the template.
- sharegpt: `{"id", "conversations": [{"from", "value"}]}`; ShareGPT has no field for thinking, so a
  reply's thinking opens its value as `<think>…</think>`.
"""

from __future__ import annotations

from dataclasses import dataclass

from remote.common.records import Record, Turn

FORMATS = ("specforge", "speculators", "sharegpt")
PER_REPLY = ("speculators",)  # formats whose rows are one reply each, whatever --per-turn says
# what a message keeps: SpecForge's ThinkingParser reads exactly these (its GeneralParser drops the
# thinking, name and tool_call_id itself); the rest of a prompt file's fields are not the trainer's
MESSAGE_KEYS = ("role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name")


class NoTokenIds(ValueError):
    pass


@dataclass(frozen=True)
class Piece:
    """What one row holds: `convo` the messages (the record's, up to its last reply), `replies` the
    (index in convo, generation) of each reply the target model made in it, `last_only` when the
    trainer trains only the last of them."""

    convo: list
    replies: list
    last_only: bool

    def trained(self) -> list:
        return self.replies[-1:] if self.last_only else self.replies

    def originals(self) -> int:
        """Assistant messages the trainer trains that the target model did not write."""
        if self.last_only:
            return 0
        return sum(m["role"] == "assistant" for m in self.convo) - len(self.replies)


def replies(rec: Record) -> list[tuple[int, Turn]]:
    """(index in conversations, generation) of each reply the target model made: every assistant
    turn of a `turns: all` record, the last of any other (the turns before it are the dataset's)."""
    ends = [i for i, m in enumerate(rec.conversations) if m["role"] == "assistant"]
    if rec.turns is None:
        ends = ends[-1:]
    return list(zip(ends, rec.generations()))


def pieces(rec: Record, per_reply: bool) -> list[Piece]:
    made = replies(rec)
    if not per_reply:
        return [Piece(rec.conversations, made, last_only=False)]
    return [
        Piece(rec.conversations[: i + 1], made[: k + 1], last_only=True)
        for k, (i, _) in enumerate(made)
    ]


def specforge_cut(convo: list) -> str | None:
    """Where SpecForge's parser (`GeneralParser.parse`) would cut or drop part of this conversation,
    its own rules: a first system message, then a user turn; an assistant only after a user or a
    tool message, a tool message only after an assistant or a tool."""
    rest = convo[1:] if convo and convo[0]["role"] == "system" else convo
    if not rest or rest[0]["role"] != "user":
        return f"{rest[0]['role'] if rest else 'nothing'} before the first user turn"
    for prev, m in zip(rest, rest[1:]):
        if m["role"] == "assistant" and prev["role"] not in ("user", "tool"):
            return f"an assistant reply right after a {prev['role']} message"
        if m["role"] == "tool" and prev["role"] not in ("assistant", "tool"):
            return f"a tool message right after a {prev['role']} message"
    return None


def message(m: dict) -> dict:
    out = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("reasoning_content") is None and m.get("reasoning") is not None:
        m = {**m, "reasoning_content": m["reasoning"]}  # vLLM's input name for it, in a dataset
    for k in MESSAGE_KEYS[2:]:
        if m.get(k) is not None and (k != "reasoning_content" or m["role"] == "assistant"):
            out[k] = m[k]
    return out


def turn_index(piece: Piece) -> int:
    """The trained reply's place among the row's assistant turns, the dataset's own included (the
    index SpecForge's expansion of a conversation into per-turn rows writes)."""
    i = piece.replies[-1][0]
    return sum(m["role"] == "assistant" for m in piece.convo[:i])


def specforge(rec: Record, piece: Piece, k: int | None) -> dict:
    row = {"id": rec.id, "status": "success"}
    if k is not None:
        t = turn_index(piece)
        row.update(
            id=f"{rec.id}#turn{t}",
            source_id=rec.id,
            source_row_index=rec.index,
            assistant_turn_index=t,
        )
    return {**row, "conversations": [message(m) for m in piece.convo]}


def speculators(rec: Record, piece: Piece, k: int | None) -> dict:
    i, g = piece.replies[-1]
    if g.token_ids is None:
        raise NoTokenIds(rec.id)
    prompt, gen = g.prompt_token_ids or [], g.token_ids
    return {
        "id": rec.row_id(k or 0),
        "primary_id": rec.id,
        "input_ids": [*prompt, *gen],
        "loss_mask": [0] * len(prompt) + [1] * len(gen),
        "conversations": [message(m) for m in piece.convo],  # exactly the turn input_ids hold
        "metadata": {
            "idx": rec.index,
            "finish_reason": g.finish_reason,
            "is_tool_call": bool(piece.convo[i].get("tool_calls")),
            "usage": g.usage,
        },
    }


_SHAREGPT = {"user": "human", "assistant": "gpt", "system": "system", "tool": "tool"}


def sharegpt(rec: Record, piece: Piece, k: int | None) -> dict:
    turns = []
    for m in piece.convo:
        value = m.get("content") or ""
        if m["role"] == "assistant" and m.get("reasoning_content"):
            value = f"<think>\n{m['reasoning_content']}\n</think>\n\n{value}"
        turns.append({"from": _SHAREGPT.get(m["role"], m["role"]), "value": value})
    row_id = rec.id if k is None else f"{rec.id}#turn{turn_index(piece)}"
    return {"id": row_id, "conversations": turns}


ROWS = {"specforge": specforge, "speculators": speculators, "sharegpt": sharegpt}
