"""Stands in for speculators 0.9.0's offline trainer, `python -m speculators.train ARGS`, in the fast
test tier, where the real one (torch, a GPU or the CPU launcher, minutes a run) does not fit.

Kept from the real one: its flags (unknown ones accepted); the data folder it reads (the stand-in
`datasets`' save_to_disk, rows with input_ids, loss_mask, seq_len; row i's file
hidden_states/hs_<i>.safetensors, a missing one failing the step that reads it, as
`--on-missing raise` does); the first int(n * --train-data-ratio) rows trained, the rest validated;
the save folder's layout, each checkpoint's files written in the real order (training_state.json
last) and its links (epoch<E>_step<N> / epoch<E>_end, checkpoint_best, val_metrics.json only where
the best improved); when it saves (--checkpoint-freq, the real rules); resume (the highest
integer-named real folder: mid-epoch from its local_step, the next epoch after an end, nothing to
do after the last, `interrupted/` warned about and never used); SIGTERM once training runs (it
interrupts whatever runs, a save included, then saves interrupted/ with no state and exits 0;
before that, the default: exit 143); and its stdout lines, copied from a real run's with Rich's
layout (time or spaces, the level, the message, `file.py:NNN`).

Not kept: training (the losses are made up and fall with the steps), vocab mappings, the config
dump. An epoch's steps are as many as the real one packs (remote/job/train/epoch_steps, which the
real tier holds to the real sampler), unless STAND_IN_TRAINER_ROWS_PER_STEP says how many rows a
step takes.

Test hooks, from the environment:
  STAND_IN_TRAINER_GATE=<file>        before each step, wait until the file exists; when it holds a
                                      number N, also until the step's global_step < N (a test lets
                                      it run to step N and holds it there: no sleeping by time)
  STAND_IN_TRAINER_FAIL=<N>           fail before global step N: a traceback on stderr, exit 1
  STAND_IN_TRAINER_ROWS_PER_STEP=<k>  rows per step (default 1)
  STAND_IN_TRAINER_STEP_S=<s>         seconds each step takes (default 0)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from datasets import load_from_disk

MIN_STEP_PCT = 0.25  # the real trainer's: no mid-epoch save this close to the epoch's end


class TrainingInterruptedError(Exception):
    pass


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="__main__.py")
    p.add_argument("--verifier-name-or-path", required=True)
    p.add_argument("--data-path", default="./output")
    p.add_argument("--save-path", default="./output/checkpoints")
    p.add_argument("--target-layer-ids", type=int, nargs="+", default=None)
    p.add_argument("--num-layers", type=int, default=1)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--total-seq-len", type=int, default=8192)
    p.add_argument("--checkpoint-freq", type=float, default=1.0)
    p.add_argument("--on-missing", default="generate")
    p.add_argument("--draft-vocab-size", type=int, default=None)
    p.add_argument("--train-data-ratio", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--no-resume-from-checkpoint", action="store_true")
    args, _unknown = p.parse_known_args(argv)
    return args


def fmt(v) -> str:
    """The real FormatDictFilter's numbers."""
    if isinstance(v, float):
        return f"{v:.2e}" if abs(v) < 0.001 or abs(v) > 999 else f"{v:.3f}"
    return f"{v:d}" if isinstance(v, int) else repr(v)


def record(d: dict) -> str:
    return ", ".join(f"{k}={fmt(v)}" for k, v in d.items())


class Log:
    """Rich's layout: the time once a second (spaces under it after), level, message, place."""

    def __init__(self):
        self.last = ""

    def __call__(self, msg: str, where: str, level: str = "INFO") -> None:
        stamp = time.strftime("[%H:%M:%S]")
        head, self.last = (stamp if stamp != self.last else " " * len(stamp)), stamp
        print(f"{head} {level:<8} {msg:<120} {where}", flush=True)


def bar(epoch: int, done: int, total: int) -> None:
    pct = 100 * done // total if total else 100
    filled = 60 * done // total if total else 60
    print(f"Epoch {epoch} {pct:>3}% {'━' * filled}{' ' * (60 - filled)} {done}/{total} "
          "[ 0:00:01 < 0:00:00 , 21 it/s ]", flush=True)  # fmt: skip


def gate(step: int) -> None:
    path = os.environ.get("STAND_IN_TRAINER_GATE")
    while path:
        try:
            text = Path(path).read_text().strip()
        except FileNotFoundError:
            text = None
        if text is not None and (not text or step < int(text)):
            return
        time.sleep(0.01)


class Trainer:
    def __init__(self, args: argparse.Namespace, log: Log):
        self.a, self.log = args, log
        self.save = Path(args.save_path)
        self.data = Path(args.data_path)
        rows = list(load_from_disk(str(self.data)))
        split = int(len(rows) * args.train_data_ratio)
        if split <= 0 or split >= len(rows):
            raise ValueError(f"a split is empty ({len(rows)} rows, ratio {args.train_data_ratio})")
        per = max(1, int(os.environ.get("STAND_IN_TRAINER_ROWS_PER_STEP") or 1))
        self.train = [list(range(i, min(i + per, split))) for i in range(0, split, per)]
        self.packed = not os.environ.get("STAND_IN_TRAINER_ROWS_PER_STEP")
        self.lengths = [int(r["seq_len"]) for r in rows]
        self.val = [list(range(i, min(i + per, len(rows)))) for i in range(split, len(rows), per)]
        self.split = split
        self.global_step = 0
        self.current_epoch = 0
        self.resume_local = 0
        self.best_val_loss = float("inf")
        self.bar_at = None  # (epoch, done, total) of the loop running: printed when interrupted

    # -- start: the real setup_trainer
    def previous_epoch(self) -> int:
        last = -1
        if not self.save.exists():
            return last
        for d in self.save.iterdir():
            if d.is_symlink() or not d.is_dir():
                continue
            if d.name == "interrupted":
                self.log(f"Found interrupted checkpoint at {d}. To resume from it, rename it to an "
                         "epoch number (e.g., 'mv interrupted 5' to resume as epoch 5).",
                         "checkpointer.py:135", "WARNING")  # fmt: skip
                continue
            try:
                last = max(last, int(d.name))
            except ValueError:
                continue
        return last

    def resume(self) -> None:
        prev = self.previous_epoch()
        if prev == -1 or self.a.no_resume_from_checkpoint:
            self.log(f"No previous training checkpoint found in '{self.save}'. Starting fresh "
                     "training run.", "trainer.py:307")  # fmt: skip
            return
        self.log(f"Found checkpoint at {self.save / str(prev)}.", "trainer.py:268")
        self.current_epoch = prev + 1
        try:
            state = json.loads((self.save / str(prev) / "training_state.json").read_text())
        except FileNotFoundError:
            state = {}
        except ValueError as e:
            self.log(f"Failed to decode training state: {e}", "trainer.py:259", "WARNING")
            state = {}
        if state and state.get("epoch") == prev and state.get("local_step", 0) > 0:
            self.current_epoch, self.resume_local = state["epoch"], state["local_step"]
            self.global_step = state.get("global_step", 0)
            self.log(f"Resuming mid-epoch from epoch={self.current_epoch} local_step="
                     f"{self.resume_local} global_step={self.global_step}.", "trainer.py:284")  # fmt: skip
        else:
            self.global_step = state.get("global_step", 0) if state else 0
            self.log(f"Resuming training on epoch {self.current_epoch}.", "trainer.py:294")
        self.restore_best()

    def restore_best(self) -> None:
        link = self.save / "checkpoint_best"
        if not link.is_symlink():
            return
        try:
            metrics = json.loads((link.parent / os.readlink(link) / "val_metrics.json").read_text())
            self.best_val_loss = float(metrics["loss_epoch"])
        except (OSError, ValueError, KeyError):
            return
        self.log(
            f"Restored best_val_loss={self.best_val_loss:.6f} from checkpoint", "trainer.py:321"
        )

    # -- saving: the real maybe_save_checkpoint, files in the real order
    def maybe_save(self, epoch, local_step: int = 0) -> None:
        f = self.a.checkpoint_freq
        if epoch != "interrupted" and f >= 1 and epoch != 0 and (epoch + 1) % f != 0:
            return
        folder = self.save / str(epoch)
        self.log(f"Saving checkpoint to {folder}", "trainer.py:689")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(self.config(), indent=2) + "\n")
        (folder / "config.py").write_text("# the Eagle3SpeculatorConfig class (stand-in)\n")
        stamp = f"stand-in weights: epoch {epoch} global_step {self.global_step}\n".encode()
        (folder / "model.safetensors").write_bytes(stamp)
        (folder / "optimizer_state_dict.pt").write_bytes(stamp)
        command = self.save / "train_command.txt"
        if command.exists():
            (folder / "train_command.txt").write_text(command.read_text())
        (folder / "scheduler_state_dict.pt").write_bytes(stamp)
        if isinstance(epoch, int):
            state = {"epoch": epoch, "local_step": local_step, "global_step": self.global_step}
            (folder / "training_state.json").write_text(json.dumps(state))
            for old in self.save.glob(f"epoch{epoch}_*"):
                if old.is_symlink():
                    old.unlink()
            suffix = f"step{local_step}" if local_step > 0 else "end"
            (self.save / f"epoch{epoch}_{suffix}").symlink_to(str(epoch))
        self.log(f"Checkpoint saved to {folder}", "trainer.py:707")

    def config(self) -> dict:
        layers = self.a.target_layer_ids or [2, 14, 25]
        return {
            "architectures": ["Eagle3DraftModel"],
            "auto_map": {"": "config.Eagle3SpeculatorConfig"},
            "draft_vocab_size": self.a.draft_vocab_size or 94,
            "dtype": "bfloat16",
            "eagle_aux_hidden_state_layer_ids": layers,
            "speculators_config": {
                "algorithm": "eagle3",
                "default_proposal_method": "greedy",
                "proposal_methods": [
                    {
                        "accept_tolerance": 0.0,
                        "proposal_type": "greedy",
                        "speculative_tokens": self.a.ttt_steps,
                        "verifier_accept_k": 1,
                    }
                ],
                "verifier": {
                    "architectures": ["Qwen3ForCausalLM"],
                    "name_or_path": self.a.verifier_name_or_path,
                },
            },  # fmt: skip
            "speculators_model_type": "eagle3",
            "speculators_version": "0.9.0",
            "transformer_layer_config": {
                "hidden_size": 128,
                "model_type": "llama",
                "num_hidden_layers": self.a.num_layers,
                "vocab_size": self.a.draft_vocab_size or 94,
            },
        }

    def update_best(self, epoch: int, metrics: dict) -> None:
        f = self.a.checkpoint_freq
        if metrics["loss_epoch"] >= self.best_val_loss:
            return
        if f >= 1 and not (epoch == 0 or (epoch + 1) % int(f) == 0):
            return
        self.best_val_loss = metrics["loss_epoch"]
        (self.save / str(epoch)).mkdir(parents=True, exist_ok=True)
        (self.save / str(epoch) / "val_metrics.json").write_text(json.dumps(metrics))
        link = self.save / "checkpoint_best"
        if link.is_symlink():
            link.unlink()
        link.symlink_to(str(epoch), target_is_directory=True)
        self.log(f"Updated checkpoint_best -> {epoch} (loss_epoch={self.best_val_loss:.6f})",
                 "trainer.py:727")  # fmt: skip

    # -- the loops
    def check_files(self, batch: list[int], first: int) -> None:
        for i in batch:
            if not (self.data / "hidden_states" / f"hs_{i}.safetensors").exists():
                raise RuntimeError(f"Failed to load hidden states for sample {i - first}.")

    def step_metrics(self, epoch: int) -> dict:
        g = self.global_step
        loss = 1.5 / (1 + 0.1 * g)
        out = {}
        for k in range(self.a.ttt_steps):
            acc = min(1.0, 0.3 + 0.02 * g) / (k + 1)
            out |= {
                f"train/loss_{k}": loss / 3,
                f"train/full_acc_{k}": acc,
                f"train/cond_acc_{k}": acc,
            }
        out |= {"train/loss": loss, "train/error_records": 0.0, "profile/step_ms": 81.364,
                "profile/tokens_per_s": 1290.0 + g, "epoch": epoch, "lr/Muon": self.a.lr,
                "lr/AdamW": self.a.lr, "global_step": g}  # fmt: skip
        return out

    def train_epoch(self, epoch: int) -> None:
        num_steps = len(self.train)
        if self.packed:
            from remote.job.train.epoch_steps import steps_per_epoch

            ratio, seq = self.a.train_data_ratio, self.a.total_seq_len
            num_steps = steps_per_epoch(self.lengths, seq, ratio, epoch=epoch)
        skip = self.resume_local if epoch == self.current_epoch else 0
        self.resume_local = 0
        if skip:
            self.log(f"Fast-skipping {skip} batches via sampler slice (no vLLM calls for skipped "
                     f"batches). epoch={epoch}, global_step={self.global_step}.", "trainer.py:471")  # fmt: skip
        f = self.a.checkpoint_freq
        interval = max(1, round(num_steps * f)) if f < 1 else None
        fail = os.environ.get("STAND_IN_TRAINER_FAIL")
        for local_step in range(skip + 1, num_steps + 1):
            self.bar_at = (epoch, local_step - 1 - skip, num_steps - skip)
            gate(self.global_step)
            if fail and int(fail) == self.global_step:
                raise RuntimeError(f"stand-in trainer: step {fail} fails (STAND_IN_TRAINER_FAIL)")
            self.check_files(self.train[min(local_step, len(self.train)) - 1], 0)
            time.sleep(float(os.environ.get("STAND_IN_TRAINER_STEP_S") or 0))
            self.log(record(self.step_metrics(epoch)), "trainer.py:587")
            self.global_step += 1
            if interval and local_step % interval == 0:
                if num_steps - local_step >= interval * MIN_STEP_PCT:
                    self.maybe_save(epoch, local_step)
        self.bar_at = None
        bar(epoch, num_steps - skip, num_steps - skip)

    def val_epoch(self, epoch: int) -> dict:
        for batch in self.val:
            self.check_files(batch, self.split)
        bar(epoch, len(self.val), len(self.val))
        loss = 1.2 / (1 + 0.05 * self.global_step)
        metrics = {}
        for k in range(self.a.ttt_steps):
            acc = min(1.0, 0.4 + 0.02 * self.global_step) / (k + 1)
            metrics |= {f"loss_{k}_epoch": loss / 3, f"full_acc_{k}_epoch": acc,
                        f"cond_acc_{k}_epoch": acc}  # fmt: skip
        metrics["loss_epoch"] = loss
        self.log(record({**{f"val/{k}": v for k, v in metrics.items()}, "epoch": epoch}),
                 "trainer.py:671")  # fmt: skip
        return metrics

    def run_training(self) -> None:
        n = self.a.epochs
        for epoch in range(self.current_epoch, n):
            self.log(f"Training epoch {epoch + 1}/{n} started", "trainer.py:737")
            self.train_epoch(epoch)
            self.log(f"Training epoch {epoch + 1}/{n} completed", "trainer.py:739")
            self.maybe_save(epoch)
            self.log(f"Validation epoch {epoch + 1}/{n} started", "trainer.py:754")
            metrics = self.val_epoch(epoch)
            self.log(f"Validation epoch {epoch + 1}/{n} completed", "trainer.py:756")
            self.update_best(epoch, metrics)


def interruptible(trainer: Trainer, log: Log) -> int:
    """The real with_graceful_shutdown: the first SIGTERM raises wherever the trainer is."""
    signals = []

    def handler(signum, frame):
        if signals:
            return
        signals.append(signum)
        log("Received SIGTERM — interrupting training to save checkpoint. Send again to force "
            "immediate exit.", "graceful_shutdown.py:111", "WARNING")  # fmt: skip
        raise TrainingInterruptedError("SIGTERM")

    signal.signal(signal.SIGTERM, handler)
    try:
        trainer.run_training()
    except TrainingInterruptedError:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if trainer.bar_at is not None:
            bar(*trainer.bar_at)
        log("Training interrupted — attempting to save checkpoint (timeout=120s, send Ctrl+C "
            "again to force exit)...", "graceful_shutdown.py:143", "WARNING")  # fmt: skip
        trainer.maybe_save("interrupted")
        log(f"Interrupt checkpoint saved to '{trainer.save / 'interrupted'}'",
            "graceful_shutdown.py:161")  # fmt: skip
    return 0


def main(argv: list[str]) -> int:
    args = parse(argv)
    log = Log()
    log(record({"speculator_type": "eagle3", "seed": args.seed, "stand_in": 1}), "logger.py:736")
    trainer = Trainer(args, log)
    trainer.save.mkdir(parents=True, exist_ok=True)
    command = " ".join([sys.argv[0], *argv])
    (trainer.save / "train_command.txt").write_text(f"# stand-in trainer\n{command}\n")
    trainer.resume()
    return interruptible(trainer, log)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
