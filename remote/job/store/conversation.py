"""Whole conversations (`turns: all`): every assistant turn regenerated in order, each request
carrying the replies made before it, one record per conversation. Finished turns are kept in a
sidecar beside the outputs (`<DS>.partial.jsonl`), so a stop of any kind costs at most the turns in
flight: a restart asks only the turns not yet answered."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from ...common.codec import write_atomic
from .outputs import AppendFile, DiskFull
from .prompts import Prompt


def reply_of(c) -> dict:
    """What one finished turn keeps (a Completion, as JSON)."""
    r = {
        "content": c.content,
        "reasoning_content": c.reasoning_content,
        "finish_reason": c.finish_reason,
        "usage": {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens},
        "model": c.model,
    }
    if c.token_ids is not None:
        r["prompt_token_ids"] = c.prompt_token_ids
        r["token_ids"] = c.token_ids
    if c.continued:
        r["continued"] = c.continued
    return r


def finished(p: Prompt, replies: list) -> bool:
    """All turns answered, or the last one cut at max_tokens (a cut reply ends its conversation:
    the next user turn would answer a reply that was never finished)."""
    return len(replies) >= len(p.turns) or (
        bool(replies) and replies[-1]["finish_reason"] == "length"
    )


def request(p: Prompt, replies: list) -> list:
    """Turn k's messages: the system prompt, the user turns up to k and the replies before it.
    An earlier reply's thinking goes in `reasoning`, the field vLLM reads on input (the chat
    template decides whether it is rendered)."""
    msgs = []
    for turn, reply in zip(p.turns, replies):
        msgs += turn
        msgs.append(_assistant(reply, "reasoning"))
    return msgs + p.turns[len(replies)]


def _assistant(reply: dict, thinking_key: str) -> dict:
    m = {"role": "assistant", "content": reply["content"] or ""}
    if reply.get("reasoning_content") is not None:
        m[thinking_key] = reply["reasoning_content"]
    return m


def record(dataset: str, p: Prompt, replies: list, stopped: str | None = None) -> dict:
    """One record for the conversation, in the outputs' shape: `conversations` holds the asked
    turns with the regenerated replies, `turns` each reply's finish, usage and token ids."""
    convo = []
    for turn, reply in zip(p.turns, replies):
        convo += turn
        convo.append(_assistant(reply, "reasoning_content"))
    last = replies[-1]
    rec = {
        "id": p.id,
        "dataset": dataset,
        "index": p.index,
        "finish_reason": last["finish_reason"],
        "usage": {
            k: sum(r["usage"][k] for r in replies) for k in ("prompt_tokens", "completion_tokens")
        },
        "conversations": convo,
        "turns_done": len(replies),
        "turns_total": len(p.turns),
        "turns": [
            {
                k: r[k]
                for k in ("finish_reason", "usage", "prompt_token_ids", "token_ids", "continued")
                if k in r
            }
            for r in replies
        ],
        "model": last["model"],
        "created": int(time.time()),
    }
    if stopped:
        rec["stopped"] = stopped  # why the conversation ends before its last turn
    if "token_ids" in last:  # the last turn's, where a one-turn record keeps them
        rec["prompt_token_ids"] = last["prompt_token_ids"]
        rec["token_ids"] = last["token_ids"]
    return rec


def prompt_hash(p: Prompt) -> str:
    """Finished turns belong to this conversation only while its user turns are unchanged."""
    return hashlib.sha256(json.dumps(p.turns, sort_keys=True).encode()).hexdigest()[:16]


class Partials:
    """The sidecar of finished turns. Rewritten at open with only the conversations still missing
    from the outputs (a torn or unreadable line is dropped: at worst one turn is asked again);
    appended one line per finished turn while the job runs."""

    def __init__(self, path: Path, done: set[str]):
        self.path = path
        self.turns: dict[str, list] = {}  # id -> [(hash, reply), ...] in turn order
        lines = []
        try:
            with open(path, "rb") as f:
                for raw in f:
                    try:
                        e = json.loads(raw)
                        pid, k = str(e["id"]), int(e["turn"])
                    except (ValueError, KeyError, TypeError):
                        continue
                    have = self.turns.setdefault(pid, [])
                    if pid in done or k > len(have):
                        continue  # recorded already, or a turn out of order: asked again
                    del have[k:]  # a turn answered again (its prompt changed) replaces the old
                    have.append((e["hash"], e["reply"]))
                    lines.append(raw if raw.endswith(b"\n") else raw + b"\n")
        except FileNotFoundError:
            pass
        self.turns = {k: v for k, v in self.turns.items() if v}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lines)
        self.file = AppendFile(path)
        self.unsaved = 0  # turns the disk had no room for (asked again after a restart)

    def answered(self, pid: str) -> int:
        """Turns of this conversation the sidecar holds."""
        return len(self.turns.get(pid, ()))

    def replies(self, p: Prompt) -> list:
        h = prompt_hash(p)
        got = []
        for eh, reply in self.turns.get(p.id, []):
            if eh != h:
                break  # the prompt changed under its id: its old replies do not answer it
            got.append(reply)
        return got

    def add(self, p: Prompt, k: int, reply: dict) -> None:
        h = prompt_hash(p)
        have = self.turns.setdefault(p.id, [])
        del have[k:]
        have.append((h, reply))
        line = json.dumps({"id": p.id, "turn": k, "hash": h, "reply": reply}, ensure_ascii=False)
        try:
            self.file.append((line + "\n").encode())
        except DiskFull:
            self.unsaved += 1  # kept in memory: only a restart would ask it again

    def forget(self, pid: str) -> None:
        self.turns.pop(pid, None)

    def close(self) -> None:
        self.file.close()
