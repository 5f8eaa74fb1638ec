"""The job's caps (run/caps.json, kept across restarts) and the parsers of what a user types for
them (standard library only: the local side checks flags before any host is touched)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from .codec import Record
from .stages import FIRST, STAGES, stage_of
from .words import suggest

CLEAR = "all"  # a cap flag's value that clears it: --max-samples all, --cap B3=all, --datasets all
# the hidden states left, and 5% more, must fit the free space for the stage to go on
DISK_MARGIN = 1.05


@dataclass
class Caps(Record):
    """What the job runs: each dataset's target is its first N prompts (None: all of them), a
    response-token budget per dataset (None: none), the datasets selected (None: every one). A
    restart without cap flags runs the same caps; a flag changes only what it names."""

    KEEP_NONE = True  # status.json and control.json readers look its keys up

    max_samples: int | None = None
    caps: dict[str, int] = field(default_factory=dict)
    max_tokens: int | None = None
    datasets: list[str] | None = None
    # what the runner makes of the prompts: answers, the target's hidden states, a draft's measure
    stage: str = FIRST.name
    # the held-out prompts a dataset's measure asks (None: hosts.yaml's server.draft.eval_samples)
    eval_samples: int | None = None
    # the draft stage, then the baseline: the watcher starts it once the draft is measured
    baseline: bool = False

    def only(self, known) -> "Caps":
        """These caps for a job of the datasets `known`: another's cap and selection dropped."""
        kept = {n: v for n, v in self.caps.items() if n in known}
        chosen = None if self.datasets is None else [n for n in self.datasets if n in known]
        return dataclasses.replace(self, caps=kept, datasets=chosen)

    def target(self, name: str) -> int | None:
        return self.caps.get(name, self.max_samples)

    def selected(self, name: str) -> bool:
        return self.datasets is None or name in self.datasets

    def follows(self) -> str | None:
        """The stage that comes once this one has finished, by itself (None: none)."""
        return stage_of(self.stage).followed_by if self.baseline else None

    def chain(self) -> list[str]:
        """Every stage that comes once this one has finished, in order: `then draft, then
        baseline`."""
        out, now = [], self
        while nxt := now.follows():
            out.append(nxt)
            now = Caps(stage=nxt, baseline=stage_of(nxt).followed_by is not None)
        return out

    def line(self) -> str:
        """One line for a log: `max-samples 20, B3=5, max-tokens 10000, datasets B1,B3`."""
        parts = [f"max-samples {'all' if self.max_samples is None else self.max_samples}"]
        parts += [f"{n}={c}" for n, c in self.caps.items()]
        if self.max_tokens is not None:
            parts.append(f"max-tokens {self.max_tokens}")
        if self.datasets is not None:
            parts.append("datasets " + ",".join(self.datasets))
        if stage_of(self.stage).label:
            parts.append(f"stage {self.stage}")
        if self.eval_samples is not None:
            parts.append(f"eval-samples {self.eval_samples}")
        if self.follows():
            parts.append(f"then {self.follows()}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Target:
    """Which of a dataset's records are the job's, counted, exported and given to the hidden states:
    those of its first `n` prompts (None: every prompt). A record beyond it (made before the cap
    was lowered, or of a prompt the file no longer has) stays on disk, left out of all of them.
    (Whether a dataset is run at all is the caps' selection: export and the report take every
    dataset's records; a stage, those of the datasets it runs.)
    The runner's rule: the prompt's id among the first `n` of the file as it is now (`ids`); a
    record keeps the index its prompt had when it was made, which a changed file moves, so the
    index decides only where the file cannot be read. `beyond`: the ids the host found beyond it,
    where only those are known (a pulled copy)."""

    n: int | None = None
    ids: frozenset[str] | None = None
    beyond: frozenset[str] | None = None

    def holds(self, rec_id: str, index: int | None) -> bool:
        if self.ids is not None:
            return rec_id in self.ids
        if self.beyond is not None:
            return rec_id not in self.beyond
        return self.n is None or (index is not None and index < self.n)


DATASET_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_TOKENS_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([kKmMgGbB]?)\s*$")
_SCALE = {"": 1, "k": 1_000, "m": 1_000_000, "g": 1_000_000_000, "b": 1_000_000_000}


def parse_tokens(text: str | int) -> int:
    """'10M' -> 10_000_000, '500k' -> 500_000, '2500000' -> 2_500_000."""
    if isinstance(text, int) and not isinstance(text, bool):  # str(True) is no count: said below
        if text < 0:
            raise ValueError(f"expected a non-negative token count, got {text}")
        return text
    m = _TOKENS_RE.match(str(text))
    if not m:
        raise ValueError(f"expected a token count like 10M, 500k or 2500000, got {text!r}")
    from fractions import Fraction  # exact: a float turns 576460752305M into ...304999936

    value = Fraction(m.group(1)) * _SCALE[m.group(2).lower()]
    if value.denominator != 1:
        raise ValueError(f"token count {text!r} is not a whole number")
    if value < 0:
        raise ValueError(f"expected a non-negative token count, got {text}")
    return int(value)


def check_dataset_name(name: str) -> str:
    if not isinstance(name, str) or not DATASET_NAME_RE.match(name):
        raise ValueError(f"dataset name {name!r} must match {DATASET_NAME_RE.pattern}")
    return name


def parse_cap(text: str) -> tuple[str, int]:
    """'B2=2636' -> ('B2', 2636)."""
    name, sep, value = str(text).partition("=")
    if not sep:
        typed = str(text).strip()
        if ":" in typed:  # B2:5, the count after another sign
            raise ValueError(f"--cap expects DS=N, got {text!r}: `--cap {typed.replace(':', '=')}`")
        raise ValueError(
            f"--cap expects DS=N, got {text!r}: `--cap {typed or 'B2'}=500` caps it at 500, "
            "`=all` takes it back to --max-samples"
        )
    if not name.strip():
        raise ValueError(f"--cap expects DS=N, got {text!r}: the dataset first (`--cap B2{text}`)")
    check_dataset_name(name.strip())
    if "=" in value.partition(",")[2]:  # a list where one is taken: say how several are given
        raise ValueError(f"--cap {text!r}: one DS=N a flag: --cap B2=3 --cap B3=4")
    try:
        n = int(value.strip())
    except ValueError:
        raise ValueError(
            f"--cap {text!r}: N must be a whole number, or `all` to take the dataset back to "
            "--max-samples"
        ) from None
    if n < 0:
        raise ValueError(f"--cap {text!r}: N must be >= 0")
    return name.strip(), n


def repeated(names) -> str | None:
    """The first name given twice (a name typed for another, mostly), or None."""
    names = list(names)
    return next((n for i, n in enumerate(names) if n in names[:i]), None)


def parse_dataset_list(text: str | None) -> list[str] | None:
    if text is None or text == "":
        return None
    names = [n.strip() for n in str(text).split(",")]
    if "" in names:  # `B1,,B2`, a stray comma: a name lost in typing, never one to skip
        raise ValueError(f"expected dataset names, comma-separated (B2,B3), got {text!r}")
    for n in names:
        check_dataset_name(n)
    if twice := repeated(names):
        raise ValueError(f"{twice} is named twice in {text!r}: give each dataset once")
    return names


def samples(text, leave_out: str = " (to leave datasets out: --datasets)") -> int | str:
    if str(text).strip().lower() == CLEAR:
        return CLEAR
    try:
        n = int(str(text))
    except ValueError:
        raise ValueError(f"expected a whole number (7000) or `{CLEAR}`, got {text!r}") from None
    if n < 1:
        raise ValueError(f"expected a number >= 1 or `{CLEAR}`, got {n}{leave_out}")
    return n


def held_out(text) -> int | str:
    """--eval-samples: a count of prompts a dataset's measure asks (0 measures nothing)."""
    return samples(text, leave_out="")


def token_budget(text) -> int | str:
    if str(text).strip().lower() in ("none", CLEAR):
        return CLEAR
    try:
        n = parse_tokens(text)
    except ValueError:
        n = -1  # said below, as one of the counts it may be
    if n < 1:  # 0: a budget spent before it starts, every dataset stopped at once
        raise ValueError(
            f"expected a token count >= 1 (10M, 500k, 2500000), or `none` for no budget, got {text!r}"
        )
    return n


def cap_change(text) -> tuple[str, int | str]:
    name, sep, value = str(text).partition("=")
    if sep and value.strip().lower() == CLEAR:
        return parse_cap(f"{name}=1")[0], CLEAR
    name, n = parse_cap(text.replace("=-", "=") if sep else text)  # the sign: said below
    if value.strip().startswith("-") or n == 0:
        raise ValueError(
            f"--cap {text!r}: N must be >= 1 (to leave {name} out: --datasets; "
            f"to give it back the default: {name}=all)"
        )
    return name, n


def selection(text) -> tuple[str, ...] | str:
    if str(text).strip().lower() == CLEAR:
        return CLEAR
    if not str(text).strip():
        raise ValueError(f"expected dataset names, comma-separated (B2,B3), or `all`, got {text!r}")
    return tuple(parse_dataset_list(text))


def stage(text) -> str:
    if str(text).strip() not in STAGES:
        hint = suggest(str(text).strip().replace("_", "-"), STAGES)
        raise ValueError(f"expected one of {', '.join(STAGES)}, got {text!r}{hint}")
    return str(text).strip()


def fmt_bytes(n: float) -> str:
    """A size as every command says it: 56.0 KiB, 4.2 TiB (powers of 1024, as df -h counts)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


@dataclass
class CapRow:
    """One dataset's caps after a restart (or a dry run), and before it."""

    done: int = 0
    target: int = 0
    state: str = ""
    prompts: int = 0  # prompts in the dataset's file (0: not known yet, a dry run before any run)
    # a dry run that moves a target over records the status cannot place: done is at least `done`,
    # at most this (None: `done` is exact)
    done_most: int | None = None
    cap: int | None = None  # the cap it runs with (None: every prompt)
    was: int | None = None  # the cap before this command
    selected: bool = True
    was_selected: bool = True
    # a live re-cap's: records beyond the target, and answers in flight beyond it (sent before it
    # was lowered), which finish and are kept beyond it too
    beyond: int = 0
    in_flight_beyond: int = 0
    # the target the last runner of this stage had (None: not known; 0: the dataset is new to it)
    was_target: int | None = None

    @property
    def changed(self) -> bool:
        return self.cap != self.was or self.selected != self.was_selected

    @property
    def raised(self) -> bool:
        """The restart runs more of the dataset than before: its cap raised, it selected again, or
        its target grown with its file (prompts added, a dataset new to the job); never where
        every prompt of the new target is done already."""
        if not self.selected:
            return False
        if self.prompts and self.target and self.done >= self.target:
            return False  # nothing to run (a done said as a range may yet leave some)
        return not self.was_selected or self.cap_raised or self.grown

    @property
    def cap_raised(self) -> bool:
        return (
            self.was is not None
            and (self.cap is None or self.cap > self.was)
            and (self.prompts == 0 or self.was < self.prompts)
        )

    @property
    def grown(self) -> bool:
        """Its target is larger than the last runner's, its cap the same (a file grown, a dataset
        new to the job)."""
        return self.was_target is not None and self.target > self.was_target

    def moved(self, target: int, records: int) -> None:
        """Its target moved from the status's (`done` of its `target`, `records` in all) to
        `target`: the records in the new one, exact where the counts tell (every prompt of the old
        target done, or none beyond it), else the least and the most they may be."""
        beyond = records - self.done  # beyond the old target: past its end
        if target <= self.target:
            least, most = max(0, self.done - (self.target - target)), min(self.done, target)
        else:
            least, most = self.done, self.done + min(beyond, target - self.target)
        self.target, self.done = target, least
        self.done_most = most if most != least else None

    @property
    def short_of_cap(self) -> bool:
        """The file has fewer prompts than the cap: the target is all of them."""
        return self.cap is not None and self.cap > self.prompts and self.target == self.prompts
