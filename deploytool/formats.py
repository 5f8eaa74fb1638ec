"""Records -> the rows each trainer reads, as its own source reads them.

- specforge: `{"id", "conversations": [{role, content, reasoning_content?}]}` — SpecForge's
  `specforge/data/parse.py` (ThinkingParser keeps `reasoning_content`, GeneralParser drops it).
  `per_turn`: one row per assistant turn, as its `scripts/expand_reasoning_conversations.py`
  writes them (`<id>#turn<k>`, the history's replies without their thinking, the row's own turn
  with it; train with `train_only_last_turn`).
- speculators: one row per generation with `input_ids` = prompt tokens + generated tokens and
  `loss_mask` 0 over the prompt, 1 over the generation, as `scripts/response_regeneration` writes
  them (`<id>_gen<k>`, `primary_id`); needs the records' token ids (`return_token_ids`).
- sharegpt: `{"id", "conversations": [{"from": human|gpt|system, "value"}]}`; ShareGPT has no field
  for thinking, so a reply's thinking opens its value as `<think>…</think>`.
"""

from __future__ import annotations

FORMATS = ("specforge", "speculators", "sharegpt")


class NoTokenIds(ValueError):
    pass


def _clean(m: dict, thinking: bool = True) -> dict:
    out = {"role": m["role"], "content": m.get("content") or ""}
    if thinking and m["role"] == "assistant" and m.get("reasoning_content") is not None:
        out["reasoning_content"] = m["reasoning_content"]
    return out


def specforge(rec: dict, per_turn: bool = False) -> list[dict]:
    convo = rec["conversations"]
    if not per_turn:
        return [{"id": rec["id"], "status": "success", "conversations": [_clean(m) for m in convo]}]
    rows, k = [], 0
    for i, m in enumerate(convo):
        if m["role"] != "assistant":
            continue
        history = [_clean(x, thinking=False) for x in convo[:i]]
        rows.append(
            {
                "id": f"{rec['id']}#turn{k}",
                "source_id": rec["id"],
                "assistant_turn_index": k,
                "status": "success",
                "conversations": history + [_clean(m)],
            }
        )
        k += 1
    return rows


def _generations(rec: dict) -> list[dict]:
    """Each regenerated turn's finish, usage and token ids (a one-turn record is one turn)."""
    if "turns" in rec:
        return rec["turns"]
    return [
        {k: rec[k] for k in ("finish_reason", "usage", "prompt_token_ids", "token_ids") if k in rec}
    ]


def has_token_ids(rec: dict) -> bool:
    return all(g.get("token_ids") is not None for g in _generations(rec))


def speculators(rec: dict, per_turn: bool = True) -> list[dict]:
    if not has_token_ids(rec):
        raise NoTokenIds(rec["id"])
    convo, rows = rec["conversations"], []
    ends = [i for i, m in enumerate(convo) if m["role"] == "assistant"]
    for k, (g, end) in enumerate(zip(_generations(rec), ends)):
        prompt, gen = g["prompt_token_ids"], g["token_ids"]
        rows.append(
            {
                "id": f"{rec['id']}_gen{k}",
                "primary_id": rec["id"],
                "input_ids": [*prompt, *gen],
                "loss_mask": [0] * len(prompt) + [1] * len(gen),
                "conversations": [_clean(m, thinking=False) for m in convo[: end + 1]],
                "metadata": {
                    "idx": rec.get("index"),
                    "finish_reason": g.get("finish_reason"),
                    "is_tool_call": False,
                    "usage": g.get("usage") or {},
                },
            }
        )
    return rows


_SHAREGPT = {"user": "human", "assistant": "gpt", "system": "system", "tool": "tool"}


def sharegpt(rec: dict, per_turn: bool = False) -> list[dict]:
    turns = []
    for m in rec["conversations"]:
        value = m.get("content") or ""
        if m["role"] == "assistant" and m.get("reasoning_content"):
            value = f"<think>\n{m['reasoning_content']}\n</think>\n\n{value}"
        turns.append({"from": _SHAREGPT.get(m["role"], m["role"]), "value": value})
    return [{"id": rec["id"], "conversations": turns}]


ROWS = {"specforge": specforge, "speculators": speculators, "sharegpt": sharegpt}
