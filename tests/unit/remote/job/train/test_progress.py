"""The trainer's stdout read as progress: lines as speculators 0.9.0 printed them in a real run
(COLUMNS=2000: Rich pads each to the width and ends it with its place), and the stand-in trainer's
whole output."""

from __future__ import annotations

from remote.job.train.progress import TrainProgress, message
from tests.helpers import train_data


def rich(msg: str, where: str = "trainer.py:587", stamp: str = "", level: str = "INFO") -> str:
    return f"{stamp or ' ' * 10} {level:<8} {msg}{' ' * 40} {where}\n"


STEP = (
    "train/loss_0=0.376, train/full_acc_0=0.667, train/cond_acc_0=0.667, train/loss_1=0.427, "
    "train/full_acc_1=0.083, train/cond_acc_1=0.125, train/loss_2=0.291, train/full_acc_2=0.00e+00, "
    "train/cond_acc_2=0.00e+00, train/loss=1.094, train/error_records=0.00e+00, "
    "profile/fetch_ms=18.106, profile/step_ms=81.364, profile/tokens_per_s=1.29e+03, "
    "profile/fetch_frac=0.223, epoch=0, lr/Muon=0.003, lr/AdamW=0.003, global_step={g}"
)
VAL = (
    "val/loss_0_epoch=0.156, val/full_acc_0_epoch=1.000, val/cond_acc_0_epoch=1.000, "
    "val/loss_1_epoch=0.240, val/full_acc_1_epoch=0.917, val/cond_acc_1_epoch=0.917, "
    "val/loss_2_epoch=0.131, val/full_acc_2_epoch=0.833, val/cond_acc_2_epoch=0.909, "
    "val/loss_epoch=0.528, epoch=0"
)
BAR = "Epoch 0 100% " + "━" * 140 + " {n}/{n} [ 0:00:01 < 0:00:00 , 21 it/s ]\n"


def fed(lines) -> TrainProgress:
    p = TrainProgress()
    for line in lines:
        p.feed(line)
    return p


def test_a_step_line_says_the_loss_accuracies_rate_and_steps_done():
    p = TrainProgress()
    assert p.feed(rich(STEP.format(g=20), stamp="[22:25:46]"))
    assert (p.epoch, p.steps_done, p.loss, p.tokens_per_s) == (0, 21, 1.094, 1290.0)
    assert p.full_acc == [0.667, 0.083, 0.0]
    assert p.lr == {"Muon": 0.003, "AdamW": 0.003}
    assert not p.feed(
        rich("Muon optimizer: 8 2D params via Muon, 5 params via AdamW.", "optimizers.py:88")
    )
    assert (
        message(rich("Training epoch 1/1 started", "trainer.py:737"))
        == "Training epoch 1/1 started"
    )


def test_a_fresh_epoch_its_checkpoints_validation_and_best():
    p = fed(
        [rich("No previous training checkpoint found in '/r/ckpt'. Starting fresh training run.", "trainer.py:307"),
         rich("Training epoch 1/2 started", "trainer.py:737")]
        + [rich(STEP.format(g=g)) for g in range(5)]
        + [rich("Saving checkpoint to /r/ckpt/0", "trainer.py:689"),
           rich("Checkpoint saved to /r/ckpt/0", "trainer.py:707")]
        + [rich(STEP.format(g=g)) for g in range(5, 12)]
        + [BAR.format(n=12), rich("Training epoch 1/2 completed", "trainer.py:739"),
           rich("Validation epoch 1/2 started", "trainer.py:754"), BAR.format(n=2), rich(VAL, "trainer.py:671"),
           rich("Validation epoch 1/2 completed", "trainer.py:756"),
           rich("Updated checkpoint_best -> 0 (loss_epoch=0.528030)", "trainer.py:727")]
    )  # fmt: skip
    assert (p.epoch, p.epochs, p.steps_done, p.local_step, p.epoch_steps) == (0, 2, 12, 12, 12)
    assert (p.val_epoch, p.val_loss, p.val_full_acc) == (0, 0.528, [1.0, 0.917, 0.833])
    assert (p.best_epoch, p.best_loss) == (0, 0.52803)
    assert [(e.kind, e.step) for e in p.events] == [("fresh", 0), ("checkpoint", 5), ("best", 12)]
    assert p.events[1].path == "/r/ckpt/0"


def test_a_mid_epoch_resume_counts_the_skipped_steps_in_the_epoch():
    p = fed(
        [rich("Found checkpoint at /r/ckpt/0.", "trainer.py:268"),
         rich("Resuming mid-epoch from epoch=0 local_step=20 global_step=20.", "trainer.py:284"),
         rich("Training epoch 1/1 started", "trainer.py:737"),
         rich("Fast-skipping 20 batches via sampler slice (no vLLM calls for skipped batches). "
              "epoch=0, global_step=20.", "trainer.py:471")]
        + [rich(STEP.format(g=g)) for g in range(20, 24)]
    )  # fmt: skip
    assert (p.steps_done, p.local_step, p.skipped) == (24, 4 + 20, 20)
    assert p.events[0].kind == "resumed" and p.events[0].step == 20
    p.feed(BAR.format(n=34))  # the resumed loop's bar counts the steps after the skip
    assert p.epoch_steps == 54


def test_a_resume_at_an_epochs_start_learns_where_it_began_from_its_first_step():
    p = fed(
        [rich("Resuming training on epoch 1.", "trainer.py:294"),
         rich("Training epoch 2/3 started", "trainer.py:737"), rich(STEP.format(g=54).replace("epoch=0", "epoch=1"))]
    )  # fmt: skip
    assert (p.epoch, p.steps_done, p.epoch_start, p.local_step) == (1, 55, 54, 1)


def test_sigterm_the_interrupt_checkpoint_and_a_traceback():
    p = fed(
        [rich("Received SIGTERM — interrupting training to save checkpoint. Send again to force "
              "immediate exit.", "graceful_shutdown.py:111", level="WARNING"),
         rich("Saving checkpoint to /r/ckpt/interrupted", "trainer.py:689"),
         rich("Checkpoint saved to /r/ckpt/interrupted", "trainer.py:707"),
         rich("Interrupt checkpoint saved to '/r/ckpt/interrupted'", "graceful_shutdown.py:161"),
         "Traceback (most recent call last):\n", '  File "x.py", line 3, in f\n',
         "RuntimeError: The size of tensor a (384) must match the size of tensor b (256)\n"]
    )  # fmt: skip
    kinds = [(e.kind, e.path) for e in p.events]
    assert kinds[:2] == [("sigterm", ""), ("interrupted", "/r/ckpt/interrupted")]
    assert kinds[2][0] == "error" and p.events[2].text.startswith("RuntimeError: The size")


def test_the_stand_in_trainers_output_reads_as_the_real_ones(tmp_path):
    folder = train_data.write_dataset(tmp_path / "hs", "B1", 10)
    assert (
        train_data.run_prepare(tmp_path, train_data.plan(tmp_path / "data", (folder, 1))).returncode
        == 0
    )
    run = train_data.run_trainer(train_data.trainer_args(tmp_path / "data", tmp_path / "ckpt"))
    assert run.returncode == 0, run.stderr
    p = fed(run.stdout.splitlines(keepends=True))
    assert (p.epoch, p.epochs, p.steps_done, p.epoch_steps, p.best_epoch) == (1, 2, 18, 9, 1)
    # each epoch of 9 steps: at steps 4 and 8 (every round(9 * 0.5) = 4), and its end
    assert [e.kind for e in p.events].count("checkpoint") == 6
    assert len(p.full_acc) == 3 and p.val_loss is not None
