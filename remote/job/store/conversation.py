"""Whole conversations (`turns: all`): every assistant turn regenerated in order, each request
carrying the replies made before it, one record per conversation. Finished turns are kept in a
sidecar beside the outputs (`<DS>.partial.jsonl`), so a stop of any kind costs at most the turns in
flight: a restart asks only the turns not yet answered."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ...common.codec import write_atomic
from ...common.records import Reply
from .outputs import AppendFile, DiskFull
from .prompts import Prompt


def finished(p: Prompt, replies: list[Reply]) -> bool:
    """All turns answered, or the last one cut at max_tokens (a cut reply ends its conversation:
    the next user turn would answer a reply that was never finished)."""
    return len(replies) >= len(p.turns) or (bool(replies) and replies[-1].finish_reason == "length")


def request(p: Prompt, replies: list[Reply]) -> list:
    """Turn k's messages: the system prompt, the user turns up to k and the replies before it.
    An earlier reply's thinking goes in `reasoning`, the field vLLM reads on input (the chat
    template decides whether it is rendered)."""
    msgs = []
    for turn, reply in zip(p.turns, replies):
        msgs += turn
        msgs.append(reply.message("reasoning"))
    return msgs + p.turns[len(replies)]


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
                        reply = Reply.from_json(e["reply"])
                    except (ValueError, KeyError, TypeError, AttributeError):
                        continue
                    have = self.turns.setdefault(pid, [])
                    if pid in done or k > len(have):
                        continue  # recorded already, or a turn out of order: asked again
                    del have[k:]  # a turn answered again (its prompt changed) replaces the old
                    have.append((e["hash"], reply))
                    lines.append(raw if raw.endswith(b"\n") else raw + b"\n")
        except FileNotFoundError:
            pass
        self.turns = {k: v for k, v in self.turns.items() if v}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lines)
        self.file = AppendFile(path)

    def answered(self, pid: str) -> int:
        """Turns of this conversation the sidecar holds."""
        return len(self.turns.get(pid, ()))

    def replies(self, p: Prompt) -> list[Reply]:
        h = prompt_hash(p)
        got = []
        for eh, reply in self.turns.get(p.id, []):
            if eh != h:
                break  # the prompt changed under its id: its old replies do not answer it
            got.append(reply)
        return got

    def add(self, p: Prompt, k: int, reply: Reply) -> None:
        h = prompt_hash(p)
        have = self.turns.setdefault(p.id, [])
        del have[k:]
        have.append((h, reply))
        entry = {"id": p.id, "turn": k, "hash": h, "reply": reply.to_json()}
        line = json.dumps(entry, ensure_ascii=False)
        try:
            self.file.append((line + "\n").encode())
        except DiskFull:
            pass  # kept in memory: only a restart would ask it again (no room on disk)

    def forget(self, pid: str) -> None:
        self.turns.pop(pid, None)

    def close(self) -> None:
        self.file.close()
