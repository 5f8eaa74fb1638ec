"""Records and error lines onto disk, in order, and what happens when the disk is full: the lines
wait in memory (the window bounds them), no new work is asked for, and writes are retried."""

from __future__ import annotations

import json
import time
from typing import Callable

from ...common.jobspec import release_dir
from ...common.status import DiskStatus
from . import conversation
from .datasets import DatasetRun
from .outputs import DiskFull, disk_usage, encode_record
from .prompts import Prompt
from .rates import ActiveTime, RateWindow


def record(run: DatasetRun, p: Prompt, c) -> dict:
    """The output line for one answer (one JSON object per finished prompt)."""
    assistant = {"role": "assistant", "content": c.content}
    if c.reasoning_content is not None:
        assistant["reasoning_content"] = c.reasoning_content
    rec = {
        "id": p.id,
        "dataset": run.spec.name,
        "index": p.index,
        "finish_reason": c.finish_reason,
        "usage": {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens},
        "conversations": list(p.messages) + [assistant],
        "model": c.model,
        "created": int(time.time()),
    }
    if c.token_ids is not None:  # extra_body.return_token_ids: keep the exact tokens
        rec["prompt_token_ids"] = c.prompt_token_ids
        rec["token_ids"] = c.token_ids
    if c.continued:  # made in parts, from kept tokens (the same answer)
        rec["continued"] = c.continued
    return rec


class RecordWriter:
    def __init__(self, log: Callable[[str], None], on_disk_full: Callable[[str], None]):
        self.log = log
        self.on_disk_full = on_disk_full  # told once each time the disk fills
        self.disk_full = False
        self.unwritten: list = []  # callables that each write one held line, in order
        self.bytes = RateWindow()  # bytes appended
        self.active = ActiveTime()  # the job's tokens and the seconds it made them in
        self.last_completion = time.time()
        rel = release_dir()
        self.release = rel.name if rel.parent.name == "releases" else None  # deployed: its id

    def write_record(self, run: DatasetRun, p: Prompt, c) -> None:
        self._write(run, p, record(run, p, c), c.completion_tokens)

    def write_conversation(
        self, run: DatasetRun, p: Prompt, replies: list, stopped: str | None = None
    ) -> None:
        """turns: all — one record for the whole conversation; its tokens are all turns' tokens."""
        rec = conversation.record(run.spec.name, p, replies, stopped)
        self._write(run, p, rec, rec["usage"]["completion_tokens"])

    def _write(self, run: DatasetRun, p: Prompt, rec: dict, tokens: int) -> None:
        if self.release:
            rec["release"] = self.release  # which code made it (the export's manifest lists them)
        line = encode_record(rec)
        cut = rec["finish_reason"] == "length"
        empty = not (rec["conversations"][-1]["content"] or "").strip()

        def write() -> None:
            run.out.append(line, p.id, tokens, str(rec["finish_reason"] or "null"))
            run.record_done(p, tokens)
            if run.partials is not None:
                run.partials.forget(p.id)
            now = time.time()
            run.tokens.add(now, tokens)
            run.active.add(now, tokens)
            self.active.add(now, tokens)
            self.bytes.add(now, len(line))
            self.last_completion = now
            run.finish_length += cut
            run.empty += empty

        run.ledger.answered(p.id)
        self._write_or_hold(write)

    def write_error(self, run: DatasetRun, p: Prompt, reason: str, attempts: int) -> None:
        rec = {
            "id": p.id,
            "dataset": run.spec.name,
            "index": p.index,
            "error": reason,
            "attempts": attempts,
            "time": int(time.time()),
        }
        line = (json.dumps(rec, ensure_ascii=False) + "\n").encode()

        def write() -> None:
            run.err.append(line)
            run.errors += 1

        self.log(f"{run.spec.name} {p.id}: error: {reason}")
        self._write_or_hold(write)

    def _write_or_hold(self, write) -> None:
        """Write now; or, on a full disk (or with earlier lines still waiting), keep it, in order."""
        if not self.unwritten:
            try:
                write()
                return
            except DiskFull as e:
                self._full(str(e))
        self.unwritten.append(write)

    def _full(self, why: str) -> None:
        if self.disk_full:
            return
        self.disk_full = True
        self.log(
            f"disk full: {why}; no line torn, answers wait in memory, no new requests until there is "
            "space (writes retried every 3s)"
        )
        self.on_disk_full(why)

    def flush(self) -> None:
        """Write what waits, in order, as far as the disk allows."""
        while self.unwritten:
            try:
                self.unwritten[0]()
            except DiskFull:
                return
            self.unwritten.pop(0)
        if self.disk_full:
            self.disk_full = False
            self.log("disk has space again: the held answers are written; carrying on")

    def disk(self, where, now: float, started: float) -> DiskStatus:
        d = disk_usage(where)
        rate = self.bytes.per_s(now, started)
        free = d["free_bytes"]
        hours = round(free / rate / 3600, 1) if rate > 0 and free is not None else None
        return DiskStatus(
            free, d["total_bytes"], self.disk_full, held=len(self.unwritten), hours_left=hours
        )
