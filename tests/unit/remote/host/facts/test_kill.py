"""Stopping process trees on real processes: no signal to a pid that names another process now,
TERM then KILL after the grace, and every process carrying the job's token, wherever it went."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

from remote.common import procinfo
from remote.host.facts.kill import signal_if_same, terminate, token_holders, wait_gone

IGNORES_TERM = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)"


def spawn(setup: str = "pass", env=None) -> subprocess.Popen:
    """A process that runs `setup`, says so, then sleeps: returned once its handlers are set."""
    code = f"{setup}; import sys, time; print('ready', flush=True); time.sleep(60)"
    p = subprocess.Popen(
        [sys.executable, "-c", code],
        start_new_session=True,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
    )
    assert p.stdout.readline() == b"ready\n"
    return p


def test_a_pid_is_signalled_only_while_it_is_the_same_process():
    p = spawn()
    start = procinfo.start_time(p.pid)
    assert signal_if_same(p.pid, start + 1, signal.SIGTERM, group=True) is False  # pid reused
    assert p.poll() is None
    assert signal_if_same(p.pid, start, signal.SIGTERM, group=True) is True
    assert p.wait(5) == -signal.SIGTERM
    assert signal_if_same(p.pid, start, signal.SIGTERM, group=False) is False  # gone


def test_term_then_kill_after_the_grace():
    polite, stubborn = spawn(), spawn(IGNORES_TERM)
    targets = {q.pid: procinfo.start_time(q.pid) for q in (polite, stubborn)}
    t0 = time.monotonic()
    killed = terminate(targets, grace=0.5)
    assert killed == [stubborn.pid] and time.monotonic() - t0 >= 0.5
    assert polite.wait(5) == -signal.SIGTERM and stubborn.wait(5) == -signal.SIGKILL
    assert wait_gone(targets, 0.1) == []


def test_every_holder_of_the_token_goes_and_no_other():
    token = uuid.uuid4().hex
    holder = spawn(IGNORES_TERM, env={"TEST_JOB_TOKEN": token})
    other = spawn(env={"TEST_JOB_TOKEN": "someone else"})
    try:
        assert token_holders("TEST_JOB_TOKEN", token) == [holder.pid]
        killed = terminate({}, grace=0.1, env_key="TEST_JOB_TOKEN", token=token)
        assert killed == [holder.pid] and holder.wait(5) == -signal.SIGKILL
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
