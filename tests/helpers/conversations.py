"""Prompt files of whole conversations (the dataset's own answers in them) and a job over them."""

from __future__ import annotations

import json

from tests.helpers.runner_jobs import make_root

ORIGINAL = "ORIGINAL ANSWER"  # the dataset's own assistant text: never sent, never recorded


def write_conversations(path, n: int, turns: int = 3, ds: str = "MT", tools_at=()) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in range(n):
            msgs = [{"role": "system", "content": "be brief"}]
            for k in range(turns):
                msgs.append({"role": "user", "content": f"conversation {i} turn {k}"})
                msgs.append({"role": "assistant", "content": f"{ORIGINAL} {i}.{k}"})
            if i in tools_at:
                msgs.insert(3, {"role": "tool", "content": "42"})
            f.write(json.dumps({"id": f"{ds}-{i:06d}", "messages": msgs}) + "\n")


def conversation_root(tmp_path, n: int, engine: dict, turns: int = 3, **kw):
    root = make_root(tmp_path, {"MT": 1}, engine)
    write_conversations(root / "data" / "prompts" / "MT.jsonl", n, turns, **kw)
    job = json.loads((root / "job.json").read_text())
    job["datasets"]["MT"]["turns"] = "all"
    job["extra_body"] = {"return_token_ids": True}
    (root / "job.json").write_text(json.dumps(job))
    return root
