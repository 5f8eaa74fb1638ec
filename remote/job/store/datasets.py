"""One dataset of the job while it runs: what is done, what is in flight, what is queued again, and
its files; opened (resumed) with the check that the records were made with the same settings."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ...common.codec import read_json, typed_lines, write_json
from ...common.jobspec import (
    DatasetSpec,
    Paths,
    dataset_changes_text,
    settings_changed,
    settings_then,
)
from ...common.records import ErrorLine
from ...common.state import moved_text
from ...common.status import DatasetState
from .conversation import Partials
from .ledger import Ledger, PromptState
from .outputs import AppendFile, count_lines, load_existing, repair_tail
from .prompts import Prompt, PromptFile, line_ids_unchanged
from .rates import ActiveTime, RateWindow


class BadInput(Exception):
    pass


class SettingsDiffer(BadInput):
    """Datasets whose records were made with other settings than the job's, which nothing took:
    `mixed` {name: what changed}, every one said in one line."""

    def __init__(self, mixed: dict[str, dict[str, tuple]]):
        self.mixed = mixed
        super().__init__(
            f"{dataset_changes_text(mixed)}; resuming would mix settings in one dataset: restore "
            "the settings, move their data/outputs/<DS>.jsonl aside, or pass --force"
        )


@dataclass
class DatasetRun:
    """A dataset while it runs: its target, budget and files; each prompt's state is its ledger's."""

    spec: DatasetSpec
    prompts: PromptFile
    ledger: Ledger
    tokens_of: dict[str, int]  # record id -> its response tokens, every record of the dataset
    cut: set[str]  # ids of the records cut at max_tokens
    tokens_every: int  # response tokens of every record, in the target or not
    errors: int
    out: AppendFile
    err: AppendFile
    target_n: int = 0
    # the dataset's records are those of its target's prompts: a record beyond a lowered cap is
    # kept, and counted apart (records - done), never in the tokens, cuts or budget
    done_in_target: int = 0
    tokens_in_target: int = 0
    finish_length: int = 0  # records in the target cut at max_tokens, every run's
    next_pos: int = 0
    new_records: int = 0
    empty: int = 0  # this run's records with no answer text
    tokens: RateWindow = field(default_factory=RateWindow)  # response tokens written, per second
    active: ActiveTime = field(default_factory=ActiveTime)  # and over the job's life
    budget: int | None = None
    # in flight across a reload: id -> new index
    reindexed: dict[str, int] = field(default_factory=dict)
    prompts_changed: bool = False  # the file on disk is newer than the one in use
    partials: Partials | None = None  # turns: all — finished turns of unrecorded conversations
    # --force over other settings: <DS>.meta.json as it becomes with the first record made with the
    # new ones (a dataset that gets none stays as its records were made, never read as mixed)
    meta_then: tuple[Path, dict] | None = None
    # sent (or answered, waiting for the disk) before a re-cap moved the target below them: they
    # finish and are kept beyond it, said by the re-cap (nothing new is sent beyond the target)
    beyond_in_flight: set[str] = field(default_factory=set)

    def first_record(self) -> None:
        """Before the run's first record is appended: the settings it is made with kept first, with
        where in the file that record begins (`since`, a byte offset: an export places each change
        of settings by it; a kill before the append leaves the next record there all the same)."""
        if self.meta_then is not None:
            path, meta = self.meta_then
            write_json(path, dict(meta, since=self.out.size()))
            self.meta_then = None

    @property
    def done(self):
        return self.ledger.done

    @property
    def in_flight(self):
        return self.ledger.sent

    @property
    def failed(self):
        return self.ledger.failed

    @property
    def completion_tokens(self) -> int:
        return self.tokens_in_target

    @property
    def mean_tokens(self) -> float:
        """Response tokens a record takes, over every record (the best estimate there is)."""
        n = len(self.tokens_of)
        return self.tokens_every / n if n else self.spec.est_tokens

    def set_target(self, n: int | None, budget: int | None) -> None:
        self.target_n = len(self.prompts) if n is None else min(n, len(self.prompts))
        ids = self.ledger.done_among(self.prompts.ids[: self.target_n])
        self.done_in_target = len(ids)
        self.tokens_in_target = sum(self.tokens_of.get(i, 0) for i in ids)
        self.finish_length = sum(1 for i in ids if i in self.cut)
        self.next_pos = min(self.next_pos, self.target_n)
        self.budget = budget
        unrecorded = set(self.ledger.sent) | set(self.ledger.ids(PromptState.HELD))
        # the current file's order is the one record_done counts by (a reload reindexes to it)
        inside = set()
        if unrecorded:
            inside = {pid for pid in self.prompts.ids[: self.target_n] if pid in unrecorded}
        self.beyond_in_flight = unrecorded - inside

    @property
    def in_flight_beyond(self) -> int:
        """Of the answers in flight, those beyond the target (sent before a re-cap lowered it)."""
        held = self.ledger.ids(PromptState.HELD)
        return sum(1 for pid in self.beyond_in_flight if pid in self.ledger.sent or pid in held)

    def budget_reached(self) -> bool:
        return self.budget is not None and self.tokens_in_target >= self.budget

    def budget_spoken_for(self) -> bool:
        """No new request once the answers in flight would reach the budget at the dataset's mean
        length: not a window of answers past it (256 of 8k tokens each is 2M tokens); one that ends
        it short lets the next go (at `expected_tokens`)."""
        if self.budget is None:
            return False
        return self.tokens_in_target + len(self.in_flight) * self.expected_tokens >= self.budget

    @property
    def expected_tokens(self) -> float:
        """What a record still to make will take (`DatasetSpec.expected_tokens`)."""
        return self.spec.expected_tokens(len(self.tokens_of), self.mean_tokens)

    def due_now(self, now: float) -> bool:
        due = self.ledger.next_due_at()
        return due is not None and due <= now

    def next_prompt(self, now: float) -> Prompt | None:
        if self.budget_spoken_for():
            return None
        while (p := self.ledger.due(now)) is not None:
            if p.index < self.target_n:  # a re-cap may have lowered the target
                return p
        ids = self.prompts.ids
        while self.next_pos < self.target_n:
            i = self.next_pos
            self.next_pos += 1
            if not self.ledger.is_new(ids[i]):
                continue
            return self.prompts[i]  # read and parsed only now
        return None

    def has_work(self) -> bool:
        """Something is left to send, now or after a backoff (without taking it)."""
        if self.budget_reached():
            return False
        if self.ledger.next_due_at() is not None:
            return True
        ids = self.prompts.ids
        while self.next_pos < self.target_n and not self.ledger.is_new(ids[self.next_pos]):
            self.next_pos += 1
        return self.next_pos < self.target_n

    def record_done(self, p: Prompt, tokens: int, cut: bool = False) -> bool:
        """Whether the record is in the target (counted in done, tokens and the budget)."""
        self.ledger.recorded(p.id)
        self.beyond_in_flight.discard(p.id)
        self.tokens_of[p.id] = tokens
        self.tokens_every += tokens
        if cut:
            self.cut.add(p.id)
        self.new_records += 1
        index = self.reindexed.pop(p.id, p.index)
        if not 0 <= index < self.target_n:
            return False
        self.done_in_target += 1
        self.tokens_in_target += tokens
        self.finish_length += cut
        return True

    def reload(self, new: PromptFile) -> None:
        """Use `new` from now on. Requests in flight (or answered, waiting for the disk) keep the
        prompt they were sent with; their ids are looked up in the new file so they count towards
        its target (or not, if they left it)."""
        unrecorded = list(self.ledger.sent) + list(self.ledger.ids(PromptState.HELD))
        if unrecorded:
            self.reindexed = {pid: -1 for pid in unrecorded}
            for i, pid in enumerate(new.ids):
                if pid in self.reindexed:
                    self.reindexed[pid] = i
        old, self.prompts = self.prompts, new
        old.close()
        self.next_pos = 0  # scan the new order once; done and in-flight ids are skipped
        self.prompts_changed = False

    def state(self) -> str:
        due = self.ledger.next_due_at() is not None  # a retry waits its backoff: still running
        return DatasetState.of(
            done=self.done_in_target,
            target=self.target_n,
            left=self.next_pos < self.target_n or due,
            in_flight=self.in_flight,
            failed=self.failed,  # every prompt tried: the missing ones are in <DS>.errors.jsonl
            busy=self.new_records or due,
            budget_reached=self.budget_reached(),
        )


def _made_with(name: str, meta: dict | None, fp: dict, existing, force: bool, log):
    """The dataset's meta file checked against the settings now (`fp`): (what it is to say now,
    None for as it is; what it is to say at the dataset's first record, where a --force mixes
    settings in it). Refused where records were made with other settings and nothing took them."""
    changed = settings_changed(meta, fp, accepted=False) if meta else None
    if changed is None or (changed and not existing.ids):
        return fp, None  # no records yet: what they will be made with
    if not changed:  # the records' own settings: a --force taken before and gone back on stands
        stale = "accepted" in meta  # no more (the next change is asked about again)
        return ({k: v for k, v in meta.items() if k != "accepted"} if stale else None), None
    diff = ", ".join(changed)
    accepted = not settings_changed(meta, fp)  # an earlier --force took these settings
    if not (force or accepted):
        raise SettingsDiffer({name: changed})
    if accepted:
        log(f"{name}: resuming with the changed {diff} an earlier --force took")
    else:
        log(f"{name}: --force: resuming with changed {diff}")
    since = {"since": meta["since"]} if "since" in meta else {}  # where those began in the file
    previous = [dict(settings_then(meta, fp), **since)] + list(meta.get("previous", []))
    # `accepted` is kept until its first record with them: the flag is given once
    return (None if accepted else dict(meta, accepted=fp)), dict(fp, previous=previous)


def open_dataset(paths: Paths, spec: DatasetSpec, fp: dict, force: bool, log) -> DatasetRun:
    """Repair the outputs' torn tails, read which ids exist, check the settings they were made with
    (`fp`: JobSpec.settings) and open the files the run appends to."""
    path = paths.root / spec.prompts
    if not path.exists():
        raise BadInput(
            f"{spec.name}: prompts file {path} not found (deploy it, or fix job.datasets.{spec.name}.prompts)"
        )
    out_path = paths.output(spec.name)
    repair_tail(out_path, log)
    repair_tail(paths.errors(spec.name), log)
    existing = load_existing(out_path, log)
    if existing.duplicates:
        log(
            f"{spec.name}: {existing.duplicates} duplicate ids in {out_path.name} (first record of each kept)"
        )
    meta_path = paths.meta(spec.name)
    fp = json.loads(json.dumps(dict(fp, turns=spec.turns)))  # as it reads back from JSON
    meta_now, forced = _made_with(spec.name, read_json(meta_path), fp, existing, force, log)
    prompts = PromptFile(path, spec.name, cache_dir=paths.prompt_index, turns=spec.turns)
    if not line_ids_unchanged(paths, spec.name, prompts):
        prompts.close()
        raise BadInput(moved_text([spec.name], [spec.prompts]))
    if meta_now is not None:  # past every check: a start refused writes nothing
        write_json(meta_path, meta_now)
    run = DatasetRun(
        spec,
        prompts,
        Ledger(existing.ids),
        existing.tokens,
        {i for i, f in existing.finish.items() if f == "length"},
        sum(existing.tokens.values()),
        count_lines(paths.errors(spec.name)),
        AppendFile(out_path, indexed=True),
        AppendFile(paths.errors(spec.name)),
    )
    if spec.turns == "all":
        run.partials = Partials(paths.partial(spec.name), existing.ids)
    run.meta_then = (meta_path, forced) if forced else None
    return run


def error_ids(path: Path) -> set[str]:
    return {e.id for e in typed_lines(path, ErrorLine)}
