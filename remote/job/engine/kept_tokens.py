"""The tokens of every unfinished answer, kept as they stream, so that after any stop the
answer is continued from them instead of asked again.

`run/kept.jsonl` is appended twenty times a second with one line per answer that got tokens since
the last append (its new token ids and text), and at once on SIGTERM: a `kill -9` loses at most that
twentieth of a second. An append costs what streamed since the one before, so its pace does not slow
the job as answers grow; it is never fsynced (it is there for a process that dies: after a crash of
the machine what is torn or missing of it is asked again, as any gap is).
A line carries the offset it starts at, so a torn or missing line is seen and that answer is asked
again from its start rather than continued from a wrong prefix. Rewritten at open with only the
answers still unfinished."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ...common.codec import json_lines, write_atomic
from ...common.status import KeptStatus
from ..store.outputs import AppendFile

COMPACT_AFTER = 64 << 20  # bytes appended before the file is rewritten with what is unfinished
KEEP_EVERY_S = 0.05  # between appends: what a kill -9 can lose of every answer streaming


@dataclass
class Kept:
    """What an unfinished answer has made so far."""

    sig: str  # the request it answers (its messages and settings): kept tokens answer only it
    prompt_ids: list
    ids: list = field(default_factory=list)
    reasoning: str = ""
    content: str = ""
    # the kept part ends inside the thinking: True, past it: False, cannot tell (no text): None
    thinking: bool | None = None
    parts: int = 0  # times it was continued before
    finish: str | None = None  # the answer ended (its stream broke after the last token)
    url: str | None = None  # the server that made the last part (its prefix cache holds it)


def signature(*parts) -> str:
    return hashlib.sha256(
        json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()
    ).hexdigest()[:16]


class Keeping:
    """One request while it streams: the store reads its assembly at each append."""

    __slots__ = ("key", "base", "asm", "end_id", "written", "url", "_seen", "_found", "_ended")

    def __init__(self, key: str, base: Kept, url: str | None = None):
        self.key, self.base, self.asm, self.end_id, self.url = key, base, None, None, url
        # what the file holds of it: ids (a kept base is there already), reasoning and content pieces
        self.written = (len(base.ids), 0, 0)
        # how far the assembly was looked through (pieces, ids), and what was found there: an
        # append costs what streamed since the last one, not the whole answer again
        self._seen, self._found, self._ended = (0, 0, 0), (False, False), False

    @property
    def continuing(self) -> bool:
        return bool(self.base.ids)

    def _look(self) -> None:
        a = self.asm
        r0, c0, t0 = self._seen
        reasoning, content = self._found
        reasoning = reasoning or any(a.reasoning[r0:])
        content = content or any(a.content[c0:])
        ids = a.token_ids or ()
        if not self._ended and self.end_id is not None:
            self._ended = self.end_id in ids[t0:]
        self._seen, self._found = (len(a.reasoning), len(a.content), len(ids)), (reasoning, content)

    def head(self) -> Kept | None:
        """The kept answer's facts without its tokens and text (what every line of it carries):
        None while nothing came."""
        a, b = self.asm, self.base
        if a is None or not (a.token_ids or b.ids):
            return None
        prompt = b.prompt_ids or a.prompt_token_ids
        if prompt is None:
            return None
        self._look()
        reasoning, content = self._found
        if a.split is not None:  # a continuation knows where its text is
            thinking = a.split.thinking if (a.reasoning or a.content) else b.thinking
        elif b.content or content:
            thinking = False
        elif self._ended:
            thinking = False  # the end marker came; the answer text not yet
        else:
            thinking = True if (b.reasoning or reasoning) else None
        parts = b.parts + (a.split is not None)  # a continuation is one part more
        return Kept(b.sig, prompt, [], "", "", thinking, parts, a.finish_reason, self.url)

    def now(self) -> Kept | None:
        """The kept answer with what streamed since: None while nothing came."""
        k = self.head()
        if k is None:
            return None
        a, b = self.asm, self.base
        k.ids = b.ids + (a.token_ids or [])
        k.reasoning = b.reasoning + "".join(a.reasoning)
        k.content = b.content + "".join(a.content)
        return k


class KeptFile:
    def __init__(self, path: Path):
        self.path = path
        self.live: dict[str, Keeping] = {}
        self.ended: list[str] = []  # finished since the last append: an end line each
        self.entries = self.read(path)
        self.on_disk = set(self.entries)  # answers with lines in the file (an end line closes them)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, [_whole(key, k) for key, k in self.entries.items()])
        self.file = AppendFile(path, durable=False)
        self.bytes = 0  # appended by this runner (the cost, in status and the benchmark)
        self.since_compact = 0

    @staticmethod
    def read(path: Path) -> dict[str, Kept]:
        """The kept answers the file holds; an answer with a gap in its lines is left out (asked
        again from its start)."""
        entries: dict[str, Kept] = {}
        for e in json_lines(path):  # a torn last line is none
            try:
                key, off = str(e["k"]), int(e.get("o", 0))
            except (ValueError, KeyError, TypeError):
                continue
            if e.get("end"):
                entries.pop(key, None)
                continue
            have = entries.get(key)
            if "p" in e and off == 0:
                have = entries[key] = Kept(e["s"], e["p"], parts=int(e.get("n", 0)))
            elif have is None or off != len(have.ids) or e.get("s") != have.sig:
                entries.pop(key, None)  # a gap: this answer is asked again from its start
                continue
            have.ids += e.get("t", [])
            have.reasoning += e.get("r", "")
            have.content += e.get("c", "")
            have.thinking = e.get("th")
            have.finish = e.get("f")
            have.parts = int(e.get("n", have.parts))
            have.url = e.get("u", have.url)
        return entries

    def get(self, key: str, sig: str) -> Kept | None:
        k = self.entries.get(key)
        return k if k is not None and k.sig == sig and k.ids else None

    def start(self, key: str, sig: str, url: str | None = None) -> Keeping:
        """Track a request to `url` from now on; its base is what is kept for it (if it answers
        `sig`)."""
        base = self.get(key, sig) or Kept(sig, [])
        h = self.live[key] = Keeping(key, base, url)
        return h

    def settle(self, h: Keeping) -> None:
        """The request ended without an answer: what it made stays kept for the next attempt."""
        self._append([h])
        if self.live.get(h.key) is h:
            del self.live[h.key]
        now = h.now()
        if now is not None and now.ids:
            self.entries[h.key] = now

    def end(self, key: str) -> None:
        """Answered (or given up): nothing of it is kept."""
        self.live.pop(key, None)
        self.entries.pop(key, None)
        if key in self.on_disk:
            self.on_disk.discard(key)
            self.ended.append(key)

    def flush(self) -> None:
        """One append of every live request's new tokens (and the ends since the last one)."""
        if self.since_compact > COMPACT_AFTER:
            try:
                self.compact()
            except OSError:  # a full disk: appending goes on (a later flush tries again)
                self.since_compact = COMPACT_AFTER // 2
        self._append(list(self.live.values()))

    async def keep_forever(self, every_s: float = KEEP_EVERY_S) -> None:
        while True:
            self.flush()
            await asyncio.sleep(every_s)

    def compact(self) -> None:
        """Rewrite the file with only what is unfinished, one line each (the file would otherwise
        grow by every token the job makes)."""
        lines = [_whole(key, k) for key, k in self.entries.items() if key not in self.live]
        written = {}
        for h in self.live.values():
            now = h.now()
            if now is None or not now.ids:
                continue
            lines.append(_whole(h.key, now))
            written[h] = (len(now.ids), len(h.asm.reasoning), len(h.asm.content))
        write_atomic(self.path, lines)
        self.file.close()
        self.file = AppendFile(self.path, durable=False)
        for h, w in written.items():
            h.written = w
        self.on_disk = set(self.entries) | {h.key for h in written}
        self.ended.clear()
        self.since_compact = 0

    def _append(self, handles: list) -> None:
        out = [json.dumps({"k": key, "end": 1}).encode() + b"\n" for key in self.ended]
        done = []
        for h in handles:
            n_ids, n_r, n_c = h.written
            a = h.asm
            base_n = len(h.base.ids)
            got = (a.token_ids or ()) if a is not None else ()
            if base_n + len(got) <= n_ids:
                continue  # nothing new since the last line
            if n_ids == 0:  # the first line of this answer in the file: whole, with its prompt
                now = h.now()
                if now is None:
                    continue
                out.append(_whole(h.key, now))
            else:
                head = h.head()
                if head is None:
                    continue
                r, c = "".join(a.reasoning[n_r:]), "".join(a.content[n_c:])
                out.append(_line(h.key, n_ids, head, got[n_ids - base_n :], r, c))
            done.append((h, (base_n + len(got), len(a.reasoning), len(a.content))))
        if not out:
            return
        data = b"".join(out)
        try:
            self.file.append(data)
        except OSError:  # a full disk (DiskFull), or worse: the same lines again next time
            return
        for h, written in done:
            h.written = written
            self.on_disk.add(h.key)
        self.ended.clear()
        self.bytes += len(data)
        self.since_compact += len(data)

    def close(self) -> None:
        self.flush()
        self.file.close()
        if not self.entries and not self.live:
            open(self.path, "wb").close()  # nothing unfinished: the end lines need not stay

    @property
    def tokens(self) -> int:
        """Tokens of unfinished answers held for continuing (kept and streaming now)."""
        total = sum(
            len(h.base.ids) + len((h.asm.token_ids if h.asm else None) or ())
            for h in self.live.values()
        )
        return total + sum(len(k.ids) for key, k in self.entries.items() if key not in self.live)

    def status(self, continued: int, saved: int, started_over: int) -> KeptStatus:
        waiting = sum(1 for key in self.entries if key not in self.live)
        return KeptStatus(
            True,
            None,
            self.tokens,
            waiting,
            continued,
            saved,
            started_over,
            self.bytes,
        )

    def prune(self, wanted) -> int:
        """Drop what answers no prompt still to do (recorded before the kept file heard of it)."""
        gone = [key for key in self.entries if not wanted(key)]
        for key in gone:
            self.end(key)
        return len(gone)


def _whole(key: str, k: Kept) -> bytes:
    """An answer's first line: all of it so far, with its prompt."""
    return _line(key, 0, k, k.ids, k.reasoning, k.content, first=True)


def _line(key: str, off: int, k: Kept, ids, reasoning, content, first: bool = False) -> bytes:
    e = {"k": key, "o": off, "s": k.sig, "t": ids, "th": k.thinking}
    extra = {"f": k.finish, "u": k.url, "r": reasoning, "c": content, "n": k.parts}
    e.update((name, v) for name, v in extra.items() if v)
    if first:
        e["p"] = k.prompt_ids
    return json.dumps(e, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def open_kept(path: Path, runs: dict, log) -> KeptFile:
    """The kept file, without answers already recorded; the prompts it holds are queued first
    (continued before any new prompt)."""
    kept = KeptFile(path)

    def wanted(key: str) -> bool:
        ds, pid, *turn = key.split("\t")
        if ds not in runs or pid in runs[ds].done:
            return False
        # a turn whose reply the sidecar holds ended before the kept file heard of its end
        partials = runs[ds].partials
        return not turn or partials is None or int(turn[0]) >= partials.answered(pid)

    kept.prune(wanted)
    kept.flush()
    if not kept.entries:
        return kept
    n = sum(len(k.ids) for k in kept.entries.values())
    log(f"{len(kept.entries)} unfinished answers ({n} tokens) kept: they are continued first")
    by_ds: dict[str, set] = {}
    for key in kept.entries:
        ds, pid = key.split("\t")[:2]
        by_ds.setdefault(ds, set()).add(pid)
    for ds, pids in by_ds.items():
        run = runs[ds]
        for i, pid in enumerate(run.prompts.ids):
            if pid in pids and i < run.target_n and run.ledger.is_new(pid):
                run.ledger.requeue(run.prompts[i], 0.0, partial=True)
    return kept
