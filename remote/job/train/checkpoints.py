"""speculators' save folder read back: where a run stands, whether it is done, the best checkpoint,
and the folder vLLM serves as the draft.

    <save>/<E>/{config.json, model.safetensors, optimizer_state_dict.pt, scheduler_state_dict.pt,
                train_command.txt, training_state.json, [val_metrics.json]}
    <save>/epoch<E>_step<N> -> <E>, <save>/epoch<E>_end -> <E>, <save>/checkpoint_best -> <E>
    <save>/interrupted/            what a SIGTERM saved: never resumed from (no training_state.json)

The trainer resumes from the highest integer-named real folder and its training_state.json. It
writes a checkpoint in place, file by file, training_state.json last, so a kill -9 or a SIGTERM
(its handler interrupts whatever runs, a save included) can leave that folder torn: no state (the
trainer would then go on to the next epoch and skip the rest of this one), a state it cannot read
(the same), or files newer than the state (weights of a later step than the state says). `TrainState`
says so (`torn`), and `set_aside` takes such a folder out of the trainer's sight: the run goes on
from the folder before it, or from the start.

Exit 0 is not the end of a run (a SIGTERM exits 0 too); `done` reads the folder. A run killed
while it validated its last epoch is done without that epoch's validation: `best` may then name
an earlier epoch, or nothing."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

STATE = "training_state.json"
BEST = "checkpoint_best"
VAL = "val_metrics.json"
WRITTEN_AFTER = {VAL}  # written after the state, by the validation that follows the save


def epochs_saved(save: Path) -> list[int]:
    """The integer-named real folders, in order (the links and `interrupted` are not)."""
    found = []
    try:
        entries = list(Path(save).iterdir())
    except OSError:
        return []
    for d in entries:
        if d.is_symlink() or not d.is_dir():
            continue
        try:
            found.append(int(d.name))
        except ValueError:
            continue
    return sorted(found)


@dataclass(frozen=True)
class TrainState:
    """The folder the trainer would resume from and what its training_state.json says."""

    folder: Path | None  # None: nothing saved, the trainer starts afresh
    epoch: int | None = None
    local_step: int | None = None  # 0: the epoch's end
    global_step: int | None = None
    torn: str = ""  # why the folder is not a whole save ("" when it is)

    @classmethod
    def read(cls, save: Path) -> TrainState:
        saved = epochs_saved(save)
        if not saved:
            return cls(None)
        folder = Path(save) / str(saved[-1])
        try:
            state = json.loads((folder / STATE).read_text())
            epoch, local, step = (int(state[k]) for k in ("epoch", "local_step", "global_step"))
        except FileNotFoundError:
            return cls(folder, torn=f"{folder.name}/{STATE} is missing (a save cut off)")
        except (OSError, ValueError, KeyError, TypeError) as e:
            return cls(folder, torn=f"{folder.name}/{STATE} cannot be read: {e}")
        torn = _newer_than_state(folder)
        if epoch != saved[-1]:
            torn = f"{folder.name}/{STATE} says epoch {epoch}"
        return cls(folder, epoch, local, step, torn)

    @property
    def end_of_epoch(self) -> bool:
        return self.local_step == 0


def _newer_than_state(folder: Path) -> str:
    """A file written after the state: a save that began and never reached its state."""
    try:
        stamp = (folder / STATE).stat().st_mtime_ns
        for f in folder.iterdir():
            if f.name not in WRITTEN_AFTER and f.stat().st_mtime_ns > stamp:
                return f"{folder.name}/{f.name} is newer than its {STATE} (a save cut off)"
    except OSError as e:
        return f"{folder.name}: {e}"
    return ""


def done(save: Path, epochs: int) -> bool:
    """The run has trained every epoch: its last save is the end of epoch `epochs - 1`, whole."""
    s = TrainState.read(save)
    return not s.torn and s.epoch is not None and s.epoch >= epochs - 1 and s.local_step == 0


WHOLE = (
    ".whole"  # a copy of the last checkpoint seen whole (the trainer rewrites its folder in place)
)


def keep_whole(save: Path, folder: Path) -> bool:
    """A copy of `folder`, a checkpoint just saved whole, as <save>/.whole: what a save cut off
    later goes back to (that save overwrites this very folder, file by file). Copied beside and
    renamed in; a copy the next save overtook (a file newer than the copy's state) is dropped and
    the one before kept. Whether it was kept."""
    save, folder = Path(save), Path(folder)
    part, whole = save / f"{WHOLE}.partial", save / WHOLE
    shutil.rmtree(part, ignore_errors=True)
    try:
        before = (folder / STATE).stat().st_mtime_ns
        shutil.copytree(folder, part, symlinks=True)
        overtaken = (folder / STATE).stat().st_mtime_ns != before
    except OSError:
        shutil.rmtree(part, ignore_errors=True)
        return False
    if overtaken or _newer_than_state(part) or _newer_than_state(folder):
        shutil.rmtree(part, ignore_errors=True)
        return False
    shutil.rmtree(whole, ignore_errors=True)
    os.rename(part, whole)
    return True


def set_aside(save: Path, state: TrainState) -> Path | None:
    """Move a torn folder out of the trainer's sight (renamed, then deleted), and put the last
    whole copy of it (keep_whole) in its place where there is one; where the torn one went."""
    if not state.torn or state.folder is None:
        return None
    aside = state.folder.with_name(f"torn-{state.folder.name}")
    if aside.exists():
        shutil.rmtree(aside)
    os.rename(state.folder, aside)  # one step: the trainer never sees it half gone
    shutil.rmtree(aside, ignore_errors=True)
    whole = Path(save) / WHOLE
    try:
        epoch = json.loads((whole / STATE).read_text())["epoch"]
        os.rename(whole, Path(save) / str(int(epoch)))  # the save before the one cut off
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none: the trainer goes on from the folder before it, or from the start
    return aside


def best(save: Path) -> Path | None:
    """The folder `checkpoint_best` points to (None: no link, or it points at nothing)."""
    link = Path(save) / BEST
    if not link.is_symlink():
        return None
    target = (link.parent / os.readlink(link)).resolve()
    return target if target.is_dir() else None


def val_metrics(folder: Path) -> dict[str, float]:
    """A checkpoint's val_metrics.json (`loss_epoch`, `full_acc_<i>_epoch`, ...); {} when it has
    none (only an epoch that improved on the best is written one)."""
    try:
        data = json.loads((Path(folder) / VAL).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}


def served_copy(checkpoint: Path, out: Path, aux_layers: int) -> Path:
    """The folder vLLM serves as the EAGLE-3 draft: the checkpoint's model.safetensors and its
    config.json with `transformer_layer_config.num_aux_hidden_states` (vLLM assumes 3 without it).
    A copy, never a link: the trainer rewrites an epoch's files in place when it saves it again.
    Made beside `out` and renamed in; an older copy is renamed away first and deleted after, so
    `out` is a whole copy, the old one or the new, or (killed in between) none."""
    checkpoint, out = Path(checkpoint).resolve(), Path(out)
    cfg = json.loads((checkpoint / "config.json").read_text())
    ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    if ids is not None and len(ids) != aux_layers:
        raise ValueError(
            f"{checkpoint} was trained on {len(ids)} aux layers {ids}, not {aux_layers}"
        )
    cfg.setdefault("transformer_layer_config", {})["num_aux_hidden_states"] = aux_layers
    part, old = out.with_name(f".{out.name}.partial"), out.with_name(f".{out.name}.old")
    for stale in (part, old):
        if stale.exists():
            shutil.rmtree(stale)
    part.mkdir(parents=True)
    shutil.copyfile(checkpoint / "model.safetensors", part / "model.safetensors")
    (part / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    if out.exists():
        os.rename(out, old)
    os.rename(part, out)
    shutil.rmtree(old, ignore_errors=True)
    return out
