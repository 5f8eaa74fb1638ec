"""The train stage's clock rules, on an injected clock: its ETA is the steps left at a step's time
(a dead trainer's wait to start again moves it not), a validation (silent until it ends) may stay
silent as long as its batches take on top of the stall time (a trainer installing or making its
rows is never timed), and a trainer silent for job.train.hung_minutes is killed as hung."""

from __future__ import annotations

import signal
from types import SimpleNamespace

from remote.common import stages
from remote.common.caps import Caps
from remote.common.jobspec import DatasetSpec, JobSpec, Paths
from remote.job.loop import train_stage
from remote.job.loop.train_stage import TrainStage


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def stage(tmp_path) -> tuple[TrainStage, Clock]:
    job = JobSpec((DatasetSpec("A", "a.jsonl"),), train={"epochs": 2})
    runner = SimpleNamespace(paths=Paths(tmp_path), job=job, log=lambda line: None, stop=None)
    st, clock = TrainStage(runner, Caps(stage=stages.TRAIN), False), Clock()
    st.clock, st.made_at = clock, clock.now
    st.steps, st.ratio = [100, 100], 0.9
    return st, clock


def test_the_eta_is_the_steps_left_at_a_steps_time_and_a_wait_moves_it_not(tmp_path):
    st, clock = stage(tmp_path)
    for _ in range(11):  # ten steps of 2 s
        st.progress.steps_done += 1
        st._stepped()
        clock.now += 2.0
    eta = st.status(clock.now)["eta_s"]
    assert eta == (200 - 11) * 2
    st.last_step_at = None  # the trainer died: a minute's wait, then a new one
    clock.now += 60.0
    assert st.status(clock.now)["eta_s"] == eta
    st.progress.steps_done += 1
    st._stepped()  # its first step: no time of a step (the load and the wait are not one)
    assert st.status(clock.now)["eta_s"] == (200 - 12) * 2


def test_a_validation_may_stay_silent_as_long_as_its_batches_take(tmp_path):
    st, clock = stage(tmp_path)
    assert st.stall_after() == float("inf")  # installing, making the rows: pip writes on, unread
    st.status_now.phase = "training"
    plain = st.stall_after()
    assert plain == st.job.engine.stall_minutes * 60
    st.step_s.extend([2.0, 2.0])
    st.progress.validating, st.progress.epoch = True, 0
    # 100 steps are the training's 0.9: the validation's 11.1 batches at 2 s at most
    assert abs(st.stall_after() - (plain + 100 * 0.1 / 0.9 * 2.0)) < 1e-6


def test_a_trainer_silent_for_its_hung_minutes_is_killed_as_hung(tmp_path, monkeypatch):
    st, clock = stage(tmp_path)
    killed = []
    monkeypatch.setattr(train_stage.os, "killpg", lambda pid, sig: killed.append((pid, sig)))
    st.proc = SimpleNamespace(pid=4242, returncode=None)
    st.status_now.phase = "training"
    assert st.hung_after() == 30 * 60  # its own setting, never the notification's stall time
    clock.now += st.hung_after()
    st.tick()
    assert killed == [] and st.hung is None  # at the line: not yet
    clock.now += 1.0
    st.tick()
    st.tick()
    assert killed == [(4242, signal.SIGKILL)] and st.hung.startswith("hung: it wrote nothing")


def test_a_resumes_load_and_a_save_are_no_steps_time(tmp_path):
    """The ETA after a resume: its log line, the load and the first step's warm-up, and a save
    between two steps, count as no step's time."""
    st, clock = stage(tmp_path)
    log = st.paths.trainer_log
    log.parent.mkdir(parents=True)
    log.write_text("")

    def says(line: str, at: float) -> None:
        clock.now = at
        with open(log, "a") as f:
            f.write(f"           INFO     {line}    trainer.py:1\n")
        st._read(0)

    def step(n: int, at: float) -> None:
        says(f"global_step={n}, epoch=0, train/loss=1.5, train/full_acc_0=0.5", at)

    says("Resuming mid-epoch from epoch=0 local_step=2 global_step=2.", 1000.0)
    step(2, 1100.0)  # its first step after a long load
    step(3, 1102.0)
    says("Saving checkpoint to /x/0", 1102.5)
    says("Checkpoint saved to /x/0", 1150.0)
    step(4, 1151.0)  # the first step after the save
    step(5, 1153.0)
    assert list(st.step_s) == [2.0, 2.0]
    assert st.status(1153.0)["eta_s"] == (200 - 6) * 2
