"""Prompt files: one JSON object a line, in any of the chat formats users bring."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ...common.caps import Target
from ...common.codec import write_atomic
from ...common.state import LineIds, line_ids_moved
from ...common.status import file_identity

_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "model": "assistant",
    "tool": "tool",
}


@dataclass(frozen=True)
class Prompt:
    id: str
    index: int
    messages: list | None  # None when the line could not be read (see `problem`)
    problem: str | None = None
    # turns: all — the conversation cut before each user turn: turns[0] is the system prompt and
    # the first user turn, turns[k] the user messages of turn k (the original answers are dropped)
    turns: list | None = None


_TOOL_ROLES = ("tool", "function", "ipython", "observation")
_TOOL_KEYS = ("tool_calls", "tool_call_id", "name")


def split_turns(msgs: list) -> list:
    """A conversation (original assistant answers included) -> its user turns, for `turns: all`."""
    for m in msgs:
        if m.get("role") in _TOOL_ROLES or m.get("tool_calls"):
            raise ValueError(
                "a conversation with tool calls cannot be regenerated turn by turn (each tool "
                "result answers an original call); give this dataset `turns: last`, which "
                "regenerates only the final answer"
            )
    turns, current = [], []
    for m in msgs:
        if m.get("role") == "assistant":
            if any(x.get("role") == "user" for x in current):
                turns.append(current)
                current = []
            continue  # the original answer: regenerated, never sent
        current.append(m)
    if any(x.get("role") == "user" for x in current):
        turns.append(current)
    elif current and turns:
        turns[-1] = turns[-1] + current  # a trailing system message: part of the last turn
    if not turns:
        raise ValueError("no user turn to answer")
    return turns


def to_messages(obj: dict, turns: str = "last") -> list:
    """messages | conversations (role/content or ShareGPT from/value) | prompt -> OpenAI messages.
    `turns: all` keeps the original assistant turns here (split_turns drops them)."""
    if "messages" in obj:
        msgs = obj["messages"]
    elif "conversations" in obj:
        msgs = []
        for turn in obj["conversations"]:
            if "role" in turn:
                # a tool call and its answer stay paired: without them an assistant turn is empty
                # and a tool message answers nothing
                keep = {k: turn[k] for k in _TOOL_KEYS if turn.get(k) is not None}
                msgs.append({"role": turn["role"], "content": turn.get("content", ""), **keep})
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
    if turns == "all":
        return msgs  # split_turns drops the original answers
    # a trailing assistant turn is the old answer: we generate a new one
    while msgs and msgs[-1].get("role") == "assistant":
        msgs = msgs[:-1]
    if not msgs:
        raise ValueError("no user turn to answer")
    return msgs


class PromptFile:
    """A prompt file's ids (all of them, in file order) and line offsets; a prompt's messages are read
    and parsed only when it is dispatched. The index is cached per file version (size, mtime), so a
    restart over a million prompts does not parse them all again. The file stays open: a deploy that
    replaces it (rename) does not change what this run reads."""

    def __init__(self, path, dataset: str, cache_dir: Path | None = None, turns: str = "last"):
        self.path, self.dataset, self.turns = Path(path), dataset, turns
        self._f = open(self.path, "rb")
        st = os.fstat(self._f.fileno())
        self.identity = file_identity(st)
        key = f"v2-{st.st_size}-{st.st_mtime_ns}-{dataset}-{turns}"
        cache = Path(cache_dir) / f"{dataset}.prompt-index.json" if cache_dir else None
        data = None
        if cache is not None:
            try:
                with open(cache) as f:
                    data = json.load(f)
                if data.get("key") != key:
                    data = None
            except (OSError, ValueError):
                data = None
        if data is None:
            data = self._build()
            data["key"] = key
            if cache is not None:
                try:
                    cache.parent.mkdir(parents=True, exist_ok=True)
                    write_atomic(cache, json.dumps(data))
                except OSError:
                    pass  # a cache only
        self.ids: list[str] = data["ids"]
        self.offsets: list[int] = data["offsets"]
        self.problems: dict[int, str] = {int(k): v for k, v in data["problems"].items()}
        # every line names its own id: a rewrite of the file cannot make an old id name another prompt
        self.explicit_ids: bool = data["explicit_ids"]

    def _build(self) -> dict:
        ids, offsets, problems = [], [], {}
        explicit = True
        seen: set[str] = set()
        pos = 0
        self._f.seek(0)
        for raw in self._f:
            start, pos = pos, pos + len(raw)
            if not raw.strip():
                continue
            index = len(ids)
            default_id = f"{self.dataset}-{index:06d}"
            offsets.append(start)
            try:
                obj = json.loads(raw)
                if not isinstance(obj, dict):
                    raise ValueError("line is not a JSON object")
                pid = str(obj["id"]) if obj.get("id") is not None else default_id
                explicit = explicit and obj.get("id") is not None
                msgs = to_messages(obj, self.turns)
                if self.turns == "all":
                    split_turns(msgs)  # refuses what cannot be regenerated turn by turn
                if pid in seen:
                    problems[index] = f"duplicate id {pid!r}"
                    pid = f"{default_id}-dup"
                seen.add(pid)
                ids.append(pid)
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                ids.append(default_id)
                explicit = False
                problems[index] = f"invalid prompt line {index + 1}: {e}"
        return {"ids": ids, "offsets": offsets, "problems": problems, "explicit_ids": explicit}

    def changed_on_disk(self) -> bool:
        """The path now names another file version than the one this object reads (a deploy replaced it)."""
        try:
            return file_identity(os.stat(self.path)) != self.identity
        except OSError:
            return False  # gone: keep reading ours; a start would say it is missing

    def is_prefix_of(self, other: "PromptFile") -> bool:
        """Every byte of this file starts `other` too: prompts were only appended."""
        size = self.identity["size"]
        if other.identity["size"] < size:
            return False
        left = size
        self._f.seek(0)
        other._f.seek(0)
        while left > 0:
            n = min(left, 1 << 20)
            if self._f.read(n) != other._f.read(n):
                return False
            left -= n
        return True

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> Prompt:
        pid = self.ids[index]
        if index in self.problems:
            return Prompt(pid, index, None, self.problems[index])
        self._f.seek(self.offsets[index])
        obj = json.loads(self._f.readline())
        msgs = to_messages(obj, self.turns)
        if self.turns == "all":
            turns = split_turns(msgs)
            return Prompt(pid, index, [m for t in turns for m in t], turns=turns)
        return Prompt(pid, index, msgs)

    def close(self) -> None:
        self._f.close()


def dataset_target(paths, spec, n: int | None) -> Target:
    """Dataset `spec`'s records that are the job's under cap `n`, by its prompt file as it is now
    (the runner's count); a file that cannot be read leaves the records' own index to say it."""
    try:
        pf = PromptFile(paths.root / spec.prompts, spec.name, paths.prompt_index, spec.turns)
    except OSError:
        return Target(n)
    try:
        return Target(n, frozenset(pf.ids if n is None else pf.ids[:n]))
    finally:
        pf.close()


def line_ids_unchanged(paths, name: str, prompts: PromptFile) -> bool:
    """Whether the records of a dataset made under line-number ids (its prompts had no `id`) still
    name theirs: the file they were made from begins the file now. The file now is kept for the
    next start where so; a file whose prompts have ids from its first records on keeps nothing."""
    kept = paths.line_ids / f"{name}.json"
    was = LineIds.read(kept)
    out = paths.output(name)
    records = out.exists() and out.stat().st_size > 0
    if prompts.explicit_ids and (was is None or not records):
        kept.unlink(missing_ok=True)  # ids name the prompts: no line number to keep
        return True
    if was and was.size == prompts.identity["size"] and was.begin(prompts.path):
        return True  # the same file: one read, no hash to keep again
    if line_ids_moved(paths, name, prompts.path):
        return False
    kept.parent.mkdir(parents=True, exist_ok=True)
    LineIds.of(prompts.path).write(kept)
    return True
