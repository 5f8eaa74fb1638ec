"""Prompt files: one JSON object a line, in any of the chat formats users bring."""

from __future__ import annotations

import json
from dataclasses import dataclass

_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "system": "system", "model": "assistant", "tool": "tool"}


@dataclass(frozen=True)
class Prompt:
    id: str
    index: int
    messages: list | None  # None when the line could not be read (see `problem`)
    problem: str | None = None


def to_messages(obj: dict) -> list:
    """messages | conversations (role/content or ShareGPT from/value) | prompt -> OpenAI messages."""
    if "messages" in obj:
        msgs = obj["messages"]
    elif "conversations" in obj:
        msgs = []
        for turn in obj["conversations"]:
            if "role" in turn:
                msgs.append({"role": turn["role"], "content": turn.get("content", "")})
            else:
                role = _SHAREGPT_ROLES.get(str(turn.get("from", "")).lower())
                if role is None:
                    raise ValueError(f"unknown ShareGPT speaker {turn.get('from')!r}")
                msgs.append({"role": role, "content": turn.get("value", "")})
    elif "prompt" in obj:
        if not isinstance(obj["prompt"], str):
            raise ValueError("`prompt` must be a string")
        msgs = [{"role": "user", "content": obj["prompt"]}]
    else:
        raise ValueError("no `messages`, `conversations` or `prompt` field")
    if not isinstance(msgs, list) or not msgs:
        raise ValueError("empty conversation")
    # a trailing assistant turn is the old answer: we generate a new one
    while msgs and msgs[-1].get("role") == "assistant":
        msgs = msgs[:-1]
    if not msgs:
        raise ValueError("no user turn to answer")
    return msgs


def load_prompts(path, dataset: str) -> list[Prompt]:
    """Every non-blank line in file order; unreadable lines are kept with a `problem` so they are reported."""
    out: list[Prompt] = []
    seen: set[str] = set()
    with open(path, "rb") as f:
        for raw in f:
            if not raw.strip():
                continue
            index = len(out)
            default_id = f"{dataset}-{index:06d}"
            try:
                obj = json.loads(raw)
                if not isinstance(obj, dict):
                    raise ValueError("line is not a JSON object")
                pid = str(obj["id"]) if obj.get("id") is not None else default_id
                if pid in seen:
                    out.append(Prompt(f"{default_id}-dup", index, None, f"duplicate id {pid!r}"))
                    continue
                out.append(Prompt(pid, index, to_messages(obj)))
                seen.add(pid)
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                out.append(Prompt(default_id, index, None, f"invalid prompt line {index + 1}: {e}"))
    return out
