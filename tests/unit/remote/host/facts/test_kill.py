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

IGNORES_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


def spawn(code: str = "import time; time.sleep(60)", env=None) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-c", code], start_new_session=True, env={**os.environ, **(env or {})}
    )
    for _ in range(100):  # until the interpreter runs the code (its signal handlers are set)
        if procinfo.start_time(p.pid) is not None and "-c" in procinfo.cmdline(p.pid):
            break
        time.sleep(0.01)
    time.sleep(0.2)
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
