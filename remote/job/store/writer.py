"""Records and error lines onto disk, in order, and what happens when the disk is full: the lines
wait in memory (the window bounds them), no new work is asked for, and writes are retried."""

from __future__ import annotations

import time
from typing import Callable

from ...common.jobspec import release_dir
from ...common.records import ErrorLine, Record, Reply
from ...common.status import DiskStatus
from .datasets import DatasetRun
from .outputs import DiskFull, disk_usage, encode_record
from .prompts import Prompt
from .rates import ActiveTime, RateWindow


class RecordWriter:
    def __init__(self, log: Callable[[str], None], on_disk_full: Callable[[str], None]):
        self.log = log
        self.on_disk_full = on_disk_full  # told once each time the disk fills
        self.disk_full = False
        self.unwritten: list = []  # callables that each write one held line, in order
        self.bytes = RateWindow()  # bytes appended
        self.written = [0, 0]  # this runner's records: their bytes, their tokens
        self.active = ActiveTime()  # the job's tokens and the seconds it made them in
        self.last_completion = time.time()
        self.first_completion: float | None = None  # this runner's first record
        rel = release_dir()
        self.release = rel.name if rel.parent.name == "releases" else None  # deployed: its id

    def write_record(self, run: DatasetRun, p: Prompt, c: Reply) -> None:
        rec = Record.one(run.spec.name, p.id, p.index, list(p.messages), c)
        self._write(run, p, rec)

    def write_conversation(
        self, run: DatasetRun, p: Prompt, replies: list[Reply], stopped: str | None = None
    ) -> None:
        """turns: all — one record for the whole conversation; its tokens are all turns' tokens."""
        rec = Record.conversation(run.spec.name, p.id, p.index, p.turns, replies, stopped)
        self._write(run, p, rec)

    def _write(self, run: DatasetRun, p: Prompt, rec: Record) -> None:
        rec.release = self.release  # which code made it (the export's manifest lists them)
        line = encode_record(rec.to_json())
        tokens = rec.completion_tokens
        cut = rec.finish_reason == "length"
        empty = not (rec.conversations[-1]["content"] or "").strip()

        def write() -> None:
            run.first_record()
            run.out.append(line, p.id, tokens, str(rec.finish_reason or "null"))
            run.record_done(p, tokens, cut)
            if run.partials is not None:
                run.partials.forget(p.id)
            now = time.time()
            # the rates are the dataset's speed: every answer it made, one beyond a cap lowered
            # under it too (its time, the dispatcher's from each send, was spent; its tokens left
            # out, a complete dataset's rate sank while those answers ended)
            run.tokens.add(now, tokens)
            run.active.add(tokens)
            self.active.add(tokens)
            self.bytes.add(now, len(line))
            self.written[0] += len(line)
            self.written[1] += tokens
            self.last_completion = now
            self.first_completion = self.first_completion or now
            run.empty += empty

        run.ledger.answered(p.id)
        self._write_or_hold(write)

    def write_error(self, run: DatasetRun, p: Prompt, reason: str, attempts: int) -> None:
        line = ErrorLine(p.id, run.spec.name, p.index, reason, attempts, int(time.time())).line()

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

    def disk(self, where, now: float, started: float, pace: float = 0.0) -> DiskStatus:
        """The outputs' disk, and the hours of output it holds: the bytes a token takes × the
        tokens made a second (`pace`, the ETA's: what streams; else the job's mean). The last
        minute's bytes come in bursts (answers end together) and jumped from look to look; a
        young mean of the few answers finished read `~323,220 h` while 256 long ones streamed."""
        d = disk_usage(where)
        (size, tokens), speed = self.written, pace or self.active.per_s(now)
        rate = size / tokens * speed if tokens and speed else self.bytes.per_s(now, started)
        free = d["free_bytes"]
        hours = round(free / rate / 3600, 1) if rate > 0 and free is not None else None
        return DiskStatus(
            free, d["total_bytes"], self.disk_full, held=len(self.unwritten), hours_left=hours
        )
