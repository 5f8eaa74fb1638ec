"""What speculators' trainer says on stdout, line by line, as one typed state (`TrainProgress`).

The trainer logs through Rich; run with COLUMNS=2000, every record is one line (a longer one, only
the start-up config dump, wraps onto lines that start with spaces: they match nothing here). A line
may start with `[HH:MM:SS]` or with the spaces Rich puts in its place, then the level, the message
padded with spaces and `file.py:NNN`. A step's line is a `key=value, ...` record whose
`global_step` counts the steps done before it; the progress bars (`Epoch 0 100% ━━━ 54/54 ...`) are
printed only when a loop ends or is interrupted, and a resumed epoch's bar counts only the steps it
ran after the skip, so the epoch's steps are the bar's total plus the steps skipped."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_STAMP = re.compile(r"^\s*(\[\d\d:\d\d:\d\d\])?\s*(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+")
_WHERE = re.compile(r"\s+[\w.]+\.py:\d+\s*$")
_PAIR = re.compile(r"([\w/.]+)=([^,\s]+)")
_BAR = re.compile(r"^\s*Epoch (\d+)\s+(\d+)%[\s━╸╺╾╼─-]*(\d+)/(\d+)")
_EPOCH = re.compile(r"^(Training|Validation) epoch (\d+)/(\d+) (started|completed)$")
_MID = re.compile(r"^Resuming mid-epoch from epoch=(\d+) local_step=(\d+) global_step=(\d+)\.$")
_NEXT = re.compile(r"^Resuming training on epoch (\d+)\.$")
_SAVING = re.compile(r"^Checkpoint saved to (.+)$")
_SAVE_BEGINS = re.compile(r"^Saving checkpoint to (.+)$")
_BEST = re.compile(r"^Updated checkpoint_best -> (\d+) \(loss_epoch=([\d.eE+-]+|nan|inf)\)$")
_INTERRUPTED = re.compile(r"^Interrupt checkpoint saved to '(.+)'$")
_ERROR = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Interrupt)\w*)(: .*)?$")


@dataclass(frozen=True)
class Event:
    """Something the trainer did once: `fresh`, `resumed` (at `step`, mid-epoch or at an epoch's
    start), `checkpoint` (saved to `path` after `step` steps), `sigterm`, `interrupted` (the
    interrupt checkpoint, at `path`), `best` (`epoch`), `error` (`text`: the exception's line)."""

    kind: str
    epoch: int | None = None
    step: int | None = None
    path: str = ""
    text: str = ""


def _float(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _positions(pairs: dict[str, str], prefix: str, suffix: str = "") -> list[float]:
    """`train/full_acc_0`, `_1`, ... as a list (position 0 first)."""
    out, i = [], 0
    while (v := pairs.get(f"{prefix}{i}{suffix}")) is not None:
        out.append(_float(v))
        i += 1
    return out


def message(line: str) -> str:
    """A log line's message: no time, level, padding or `file.py:NNN`."""
    line = line.rstrip("\r\n")
    m = _STAMP.match(line)
    if m:
        line = line[m.end() :]
    return _WHERE.sub("", line).strip()


@dataclass
class TrainProgress:
    epoch: int | None = None  # 0-based, the one training or validating
    epochs: int | None = None
    steps_done: int = 0  # optimizer steps over the whole run (a step line's global_step + 1)
    epoch_start: int | None = None  # steps_done when this epoch began; None: not said yet
    epoch_steps: int | None = None  # this epoch's steps, once a bar has said them
    skipped: int = 0  # steps of this epoch a mid-epoch resume skipped
    validating: bool = False
    saving: bool = False  # a checkpoint is being written (a SIGTERM now would cut it off)
    saved: str = ""  # the folder of the last checkpoint said saved
    loss: float | None = None  # the last step's train/loss
    full_acc: list = field(default_factory=list)  # per draft position, the last step's
    tokens_per_s: float | None = None
    lr: dict = field(default_factory=dict)  # optimizer name ("" when one) -> its lr
    val_epoch: int | None = None
    val_loss: float | None = None
    val_full_acc: list = field(default_factory=list)
    best_epoch: int | None = None
    best_loss: float | None = None
    events: list[Event] = field(default_factory=list)
    _resume_skip: int = 0
    _known: bool = False  # steps_done is the run's (a resume at an epoch's start does not say it)
    _traceback: bool = False

    @property
    def local_step(self) -> int | None:
        """Steps done of the current epoch (None until the trainer has said where it began)."""
        return None if self.epoch_start is None else self.steps_done - self.epoch_start

    def feed(self, line: str) -> bool:
        """Read one line of the trainer's output; whether it changed anything."""
        raw = line.rstrip("\r\n")
        if raw.startswith("Traceback (most recent call last)"):
            self._traceback = True
            return False
        if self._traceback and not raw.startswith(" ") and (m := _ERROR.match(raw)):
            self._traceback = False
            self.events.append(Event("error", self.epoch, self.steps_done, text=raw))
            return True
        if (m := _BAR.match(raw)) is not None:
            return self._bar(int(m.group(1)), int(m.group(4)))
        text = message(raw)
        if "global_step=" in text and "train/loss=" in text:
            return self._step(dict(_PAIR.findall(text)))
        if text.startswith("val/") and "val/loss_epoch=" in text:
            return self._validated(dict(_PAIR.findall(text)))
        return self._log_message(text)

    def _step(self, pairs: dict[str, str]) -> bool:
        try:
            before, epoch = int(pairs["global_step"]), int(pairs.get("epoch", self.epoch))
        except (KeyError, TypeError, ValueError):
            return False
        if self.epoch_start is None or epoch != self.epoch:  # its first step we see: where it began
            self.epoch_start = before - (self.skipped if epoch == self.epoch else 0)
        self.epoch, self.steps_done, self._known = epoch, before + 1, True
        self.loss = _float(pairs.get("train/loss", "nan"))
        self.full_acc = _positions(pairs, "train/full_acc_")
        if "profile/tokens_per_s" in pairs:
            self.tokens_per_s = _float(pairs["profile/tokens_per_s"])
        self.lr = {k[3:]: _float(v) for k, v in pairs.items() if k.startswith("lr/")}
        if "lr" in pairs:
            self.lr = {"": _float(pairs["lr"])}
        return True

    def _validated(self, pairs: dict[str, str]) -> bool:
        self.val_loss = _float(pairs["val/loss_epoch"])
        self.val_full_acc = _positions(pairs, "val/full_acc_", "_epoch")
        self.val_epoch = int(pairs["epoch"]) if "epoch" in pairs else self.epoch
        return True

    def _bar(self, epoch: int, total: int) -> bool:
        if self.validating or epoch != self.epoch or self.epoch_steps == total + self.skipped:
            return False
        self.epoch_steps = total + self.skipped  # an interrupted epoch's bar has the total too
        return True

    def _log_message(self, text: str) -> bool:
        if m := _EPOCH.match(text):
            return self._epoch_line(m.group(1), int(m.group(2)) - 1, int(m.group(3)), m.group(4))
        if m := _MID.match(text):
            self.epoch, self._resume_skip = int(m.group(1)), int(m.group(2))
            self.steps_done, self._known = int(m.group(3)), True
            self.events.append(Event("resumed", self.epoch, self.steps_done))
            return True
        if m := _NEXT.match(text):
            self.epoch, self._resume_skip, self._known = int(m.group(1)), 0, False
            self.events.append(Event("resumed", self.epoch))
            return True
        if text.startswith("No previous training checkpoint found"):
            self.steps_done, self._known = 0, True
            self.events.append(Event("fresh", 0, 0))
            return True
        if _SAVE_BEGINS.match(text):
            self.saving = True
            return True
        if m := _SAVING.match(text):
            self.saving = False
            self.saved = m.group(1)
            if m.group(1).endswith("/interrupted"):  # said again by the line after
                return False
            self.events.append(Event("checkpoint", self.epoch, self.steps_done, m.group(1)))
            return True
        return self._log_message_more(text)

    def _log_message_more(self, text: str) -> bool:
        if m := _BEST.match(text):
            self.best_epoch, self.best_loss = int(m.group(1)), _float(m.group(2))
            self.events.append(Event("best", self.best_epoch, self.steps_done))
            return True
        if m := _INTERRUPTED.match(text):
            self.events.append(Event("interrupted", self.epoch, self.steps_done, m.group(1)))
            return True
        if text.startswith("Received SIGTERM"):
            self.events.append(Event("sigterm", self.epoch, self.steps_done))
            return True
        return False

    def _epoch_line(self, kind: str, epoch: int, epochs: int, when: str) -> bool:
        self.epochs = epochs
        if kind == "Validation":
            self.validating = when == "started"
            return True
        if when == "started":
            if epoch != self.epoch or self._resume_skip == 0:
                self.epoch_steps = None  # each epoch reshuffles: its own count
            self.epoch, self.validating = epoch, False
            self.skipped, self._resume_skip = self._resume_skip, 0
            self.epoch_start = self.steps_done - self.skipped if self._known else None
        return True
