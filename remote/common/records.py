"""The job's outputs as both sides read them (standard library only).

`Record`: one line of `data/outputs/<DS>.jsonl` per finished prompt (docs/records.md lists its
fields). A one-turn record keeps its reply's finish, usage and token ids at the top; a
whole-conversation record (`turns: all`) keeps each reply's in `turns`, and its last one's at the
top as well. `RowLine`: one line of the hidden-states stage's `<DS>/rows.jsonl` per row made.

The pull protocol: the host lists its output files with a hash of the bytes just before what the
local copy already has; both sides hash with the one function, so an appended file is told from a
replaced one."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from .codec import Codec, from_dict
from .jobspec import Paths


@dataclass
class Reply:
    """One answer the target model made, as the engine, the record and the sidecar hold it."""

    content: str | None
    reasoning_content: str | None
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    model: str
    prompt_token_ids: list[int] | None = None  # vLLM `return_token_ids`: the exact tokens
    token_ids: list[int] | None = None
    continued: int = 0  # times this answer was continued from kept tokens

    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}

    def turn(self) -> Turn:
        return Turn(
            self.finish_reason, self.usage(), self.prompt_token_ids, self.token_ids, self.continued
        )

    def message(self, thinking_key: str = "reasoning_content") -> dict:
        """The assistant message this reply is (`reasoning`: vLLM's name for it on input)."""
        m = {"role": "assistant", "content": self.content or ""}
        if self.reasoning_content is not None:
            m[thinking_key] = self.reasoning_content
        return m

    def to_json(self) -> dict:
        """As the sidecar keeps a finished turn: its text and model, then its Turn's fields."""
        return {
            "content": self.content,
            "reasoning_content": self.reasoning_content,
            "model": self.model,
            **self.turn().to_json(),
        }

    @classmethod
    def from_json(cls, d: dict) -> Reply:
        t = Turn.from_json(d)
        return cls(
            d.get("content"),
            d.get("reasoning_content"),
            t.finish_reason,
            int(t.usage.get("prompt_tokens") or 0),
            int(t.usage.get("completion_tokens") or 0),
            str(d.get("model") or ""),
            t.prompt_token_ids,
            t.token_ids,
            t.continued,
        )


@dataclass
class Turn:
    """What a record keeps of each reply besides its text: finish, usage, token ids."""

    finish_reason: str | None
    usage: dict
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None
    continued: int = 0

    def to_json(self) -> dict:
        d = {"finish_reason": self.finish_reason, "usage": self.usage}
        if self.token_ids is not None:
            d["prompt_token_ids"] = self.prompt_token_ids
            d["token_ids"] = self.token_ids
        if self.continued:
            d["continued"] = self.continued
        return d

    @classmethod
    def from_json(cls, d: dict) -> Turn:
        return cls(
            d.get("finish_reason"),
            dict(d.get("usage") or {}),
            d.get("prompt_token_ids"),
            d.get("token_ids"),
            int(d.get("continued") or 0),
        )


@dataclass(frozen=True)
class TokenRow:
    """One reply as a row of exact tokens: `input_ids` the prompt's then the reply's, loss only on
    the reply's."""

    id: str
    record: str
    k: int
    prompt_ids: list[int]
    reply_ids: list[int]

    @property
    def input_ids(self) -> list[int]:
        return [*self.prompt_ids, *self.reply_ids]

    @property
    def loss_mask(self) -> list[int]:
        return [0] * len(self.prompt_ids) + [1] * len(self.reply_ids)


@dataclass
class ErrorLine(Codec):
    """One line of `<DS>.errors.jsonl`: a prompt given up on in a run (the next start asks it again)."""

    id: str
    dataset: str = ""
    index: int | None = None
    error: str = ""
    attempts: int = 0
    time: int = 0


ROWS = "rows.jsonl"  # a dataset's ledger in the hidden-states stage


@dataclass(kw_only=True)
class TrainStep(Codec):
    """One line of data/train/metrics.jsonl: a step the train stage's trainer logged (report's loss
    curve)."""

    t: float
    epoch: int = 0
    step: int = 0
    loss: float
    accuracy: list[float] = field(default_factory=list)  # per draft position


@dataclass(kw_only=True)
class RowLine(Codec):
    """One line of a dataset's rows.jsonl, fields in the file's order: row n, the reply it is, its
    exact tokens as speculators' trainer reads them, then what the check found of its hs_<n> file.
    Read back without its tokens (nearly all of a line's bytes). Only what counting the row takes
    is required: a line another release wrote is never taken for no row (the stage would make it,
    and every row after it, again)."""

    n: int
    id: str
    record: str = ""
    turn: int = 0
    input_ids: list[int] | None = None  # None: read back
    loss_mask: list[int] | None = None
    seq_len: int = 0
    tokens: int
    layers: int
    hidden: int
    dtype: str
    bytes: int
    t: float | None = None  # when it counted (Unix seconds): the report's rate

    @classmethod
    def parse(cls, raw: bytes) -> RowLine:
        """A line back, its tokens left unread; ValueError (saying why) where it is not a row's."""
        if not raw.endswith(b"\n"):
            raise ValueError("its line is torn (killed while it was written)")
        for read in (cls._small, json.loads):  # a line laid out otherwise is read whole
            try:
                return from_dict(cls, {**read(raw), "input_ids": None, "loss_mask": None})
            except (ValueError, TypeError):
                continue
        raise ValueError("its line is not a row")

    @staticmethod
    def _small(raw: bytes) -> dict:
        """The fields either side of the tokens, as `line()` lays them out."""
        ids, facts = raw.find(b'"input_ids"'), raw.rfind(b'"seq_len"')
        if not 0 < ids < facts:
            raise ValueError("no tokens between the fields")
        return json.loads(raw[:ids] + raw[facts:])

    @staticmethod
    def trained(raw: bytes) -> int:
        """The ones of a line's loss mask (its reply's tokens), counted in its bytes."""
        key = raw.find(b'"loss_mask"')
        if key < 0:
            return 0
        mask = raw.find(b"[", key)
        return raw.count(b"1", mask, raw.find(b"]", mask))


def row_lines(ledger: Path) -> Iterator[tuple[RowLine, bytes]]:
    """A ledger's rows and their lines in order, up to the first line that is not a row's (the
    stage cuts the ledger there when it starts again)."""
    try:
        with open(ledger, "rb") as f:
            for raw in f:
                try:
                    row = RowLine.parse(raw)
                except ValueError:
                    return
                yield row, raw
    except OSError:  # no ledger, or none this process may read: no rows
        return


@dataclass
class Record:
    id: str
    dataset: str
    index: int | None
    conversations: list[dict]
    last: Turn  # the last (a one-turn record's only) reply's finish, usage and token ids
    model: str
    created: int = field(default_factory=lambda: int(time.time()))
    turns: list[Turn] | None = None  # turns: all — every reply's, in order
    turns_total: int | None = None
    stopped: str | None = None  # why a conversation ends before its last turn
    release: str | None = None  # which release of the code made it

    @property
    def finish_reason(self) -> str | None:
        return self.last.finish_reason

    @property
    def completion_tokens(self) -> int:
        return sum(int(t.usage.get("completion_tokens") or 0) for t in self.generations())

    def generations(self) -> list[Turn]:
        """Each reply the target model made in this record, in order."""
        return self.turns if self.turns is not None else [self.last]

    def row_id(self, k: int) -> str:
        """The training row of this record's k-th reply (speculators' own naming)."""
        return f"{self.id}_gen{k}"

    def token_rows(self) -> list[TokenRow]:
        """Each reply as the exact tokens the target saw and wrote: the prompt's ids as vLLM
        rendered them, then the reply's (none for a reply kept without token ids)."""
        return [
            TokenRow(self.row_id(k), self.id, k, list(g.prompt_token_ids or []), list(g.token_ids))
            for k, g in enumerate(self.generations())
            if g.token_ids is not None
        ]

    @classmethod
    def one(cls, dataset: str, pid: str, index: int, messages: list, reply: Reply) -> Record:
        """One answer to a prompt's messages."""
        return cls(pid, dataset, index, [*messages, reply.message()], reply.turn(), reply.model)

    @classmethod
    def conversation(
        cls, dataset: str, pid: str, index: int, turns: list, replies: list[Reply], stopped=None
    ) -> Record:
        """Every turn regenerated: the asked turns, each followed by its reply."""
        convo = []
        for asked, reply in zip(turns, replies):
            convo += asked
            convo.append(reply.message())
        return cls(
            pid,
            dataset,
            index,
            convo,
            replies[-1].turn(),
            replies[-1].model,
            turns=[r.turn() for r in replies],
            turns_total=len(turns),
            stopped=stopped,
        )

    def to_json(self) -> dict:
        gens = self.generations()
        d = {
            "id": self.id,
            "dataset": self.dataset,
            "index": self.index,
            "finish_reason": self.last.finish_reason,
            "usage": {
                k: sum(int(t.usage.get(k) or 0) for t in gens)
                for k in ("prompt_tokens", "completion_tokens")
            },
            "conversations": self.conversations,
        }
        if self.turns is not None:
            d["turns_done"] = len(self.turns)
            d["turns_total"] = self.turns_total
            d["turns"] = [t.to_json() for t in self.turns]
        d["model"] = self.model
        d["created"] = self.created
        if self.stopped:
            d["stopped"] = self.stopped
        if self.last.token_ids is not None:
            d["prompt_token_ids"] = self.last.prompt_token_ids
            d["token_ids"] = self.last.token_ids
        if self.last.continued and self.turns is None:
            d["continued"] = self.last.continued
        if self.release:
            d["release"] = self.release
        return d

    @classmethod
    def from_json(cls, d: dict) -> Record:
        turns = [Turn.from_json(t) for t in d["turns"]] if "turns" in d else None
        last = turns[-1] if turns else Turn.from_json(d)
        return cls(
            str(d["id"]),
            str(d.get("dataset") or ""),
            d.get("index"),
            list(d["conversations"]),
            last,
            str(d.get("model") or ""),
            int(d.get("created") or 0),
            turns,
            d.get("turns_total"),
            d.get("stopped"),
            d.get("release"),
        )


# ------------------------------------------------------------------ pull

PREFIX_BLOCK = 64 * 1024


def prefix_hash(path: Path, end: int, whole: bool = False) -> str | None:
    """sha256 of the last block before `end`: enough to tell an appended file from a replaced one;
    `whole`: of every byte before it (pull --refetch: a copy changed in place is found too). Both
    sides of pull call this one function, so they hash the same bytes."""
    import hashlib

    start = 0 if whole else max(0, end - PREFIX_BLOCK)
    h, left = hashlib.sha256(), end - start
    try:
        with open(path, "rb") as f:
            f.seek(start)
            while left > 0:
                block = f.read(min(left, 1 << 20))
                if not block:
                    return None
                h.update(block)
                left -= len(block)
    except FileNotFoundError:
        return None
    return h.hexdigest()


# `ctl free`'s word for a row whose file is not the copy's (nothing freed); pull removes that copy
SHA256_DIFFERS = "its sha256 differs from the copy's"


def file_sha256(path: Path) -> str | None:
    """sha256 of a whole file (None: no such file): pull --free sums its copy, the host its file,
    with this one function."""
    import hashlib

    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 24):
                h.update(chunk)
    except FileNotFoundError:
        return None
    return h.hexdigest()


def _pull_entry(p: Path, local, whole: bool = False) -> dict:
    """A file's size, and the hash before the end of the local copy (`local` bytes) where one is
    (`whole`: of all of them)."""
    entry = {"size": p.stat().st_size}
    if isinstance(local, int) and 0 < local <= entry["size"]:
        entry["prefix_sha256"] = prefix_hash(p, local, whole)
    return entry


def hidden_ledgers(paths: Paths, have: dict, whole: bool = False) -> dict:
    """The hidden-states stage's ledgers (<DS>/rows.jsonl, append-only), for pull."""
    out = {}
    for p in sorted(paths.hidden_states.glob("*/" + ROWS)):
        name = f"{p.parent.name}/{p.name}"
        out[name] = _pull_entry(p, have.get(name), whole)
    return out


def in_job_order(names, datasets: list[str]) -> list[str]:
    """File names in the job's dataset order (a dataset's files, `<DS>.…`, by name), then those no
    dataset of the job names, by name: B2 before B10, as hosts.yaml has them."""
    rank = {ds: i for i, ds in enumerate(datasets)}

    def key(name: str):
        ds = max((d for d in rank if name.startswith(d + ".")), key=len, default=None)
        return (rank[ds] if ds is not None else len(rank), name)

    return sorted(names, key=key)


def output_files(paths: Paths, have: dict, datasets: list[str] = (), whole: bool = False) -> dict:
    """The output files to pull, in the order of the job's `datasets`."""
    out = {}
    if not paths.outputs.is_dir():
        return out
    found = {p.name: p for p in paths.outputs.iterdir()}
    for p in (found[n] for n in in_job_order(found, list(datasets))):
        if not p.is_file() or p.name.startswith(".") or p.name.endswith((".idx", ".partial.jsonl")):
            # .idx: the runner's own index, rebuilt from the outputs wherever they are;
            # .partial.jsonl: turns of unfinished conversations, rewritten at every start
            continue
        entry = out[p.name] = _pull_entry(p, have.get(p.name), whole)
        if not p.name.endswith((".jsonl", ".torn")):
            size = entry["size"]
            entry["sha256"] = prefix_hash(p, size) if size <= PREFIX_BLOCK else None
    return out
