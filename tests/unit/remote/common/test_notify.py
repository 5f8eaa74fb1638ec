"""job.notify as a process: only the events asked for, the three variables set and the job's token
not, a failing command logged with its last line, a hanging one ended by its timeout and logged;
the job's own work never waits on any of them."""

from __future__ import annotations

import threading

from remote.common.jobspec import JOB_TOKEN_ENV
from remote.common.notify import Notifier


def notifier(tmp_path, command, **cfg):
    logged, done = [], threading.Event()

    def log(line):
        logged.append(line)
        done.set()

    n = Notifier({"command": command, "on": ["finished", "stalled"], **cfg}, tmp_path, log)
    return n, logged, done


def test_the_event_goes_out_with_its_variables_and_without_the_jobs_token(tmp_path, monkeypatch):
    monkeypatch.setenv(JOB_TOKEN_ENV, "the-jobs-token")
    out = tmp_path / "got"
    show = f'echo "$DEPLOYTOOL_EVENT|$DEPLOYTOOL_MESSAGE|$DEPLOYTOOL_REMOTE_DIR|${JOB_TOKEN_ENV}|$PWD" > {out}'
    n, logged, done = notifier(tmp_path, show)
    n.send("engine_down", "not asked for")  # not in `on`: nothing runs
    n.send("finished", "B1 24/24")
    assert done.wait(60) and logged == ["notify finished: sent"] and n.sent == ["finished"]
    assert out.read_text().strip() == f"finished|B1 24/24|{tmp_path}||{tmp_path}"


def test_a_failing_command_is_logged_with_its_last_line(tmp_path):
    n, logged, done = notifier(tmp_path, "echo first; echo 'no route to host'; exit 3")
    n.send("stalled", "m")
    assert done.wait(60)
    assert logged == ["notify stalled: the command failed (exit 3) no route to host"]


def test_a_hanging_command_is_ended_by_its_timeout_and_logged(tmp_path):
    n, logged, done = notifier(tmp_path, "sleep 600", timeout=0.2)
    n.send("stalled", "m")  # returns at once: the job does not wait on it
    assert done.wait(60)
    assert logged == ["notify stalled: the command failed (timed out)"]


def test_no_command_sends_nothing(tmp_path):
    n = Notifier(None, tmp_path, lambda line: None)
    n.send("finished", "m")
    assert n.sent == []


def test_events_are_told_in_the_order_they_happened_even_when_one_command_is_slow(tmp_path):
    out = tmp_path / "got"
    slow_first = (
        f'[ "$DEPLOYTOOL_EVENT" = stalled ] && sleep 0.5; echo "$DEPLOYTOOL_EVENT" >> {out}'
    )
    n = Notifier({"command": slow_first, "on": ["stalled", "finished"]}, tmp_path, lambda s: None)
    n.send("stalled", "m")
    n.send("finished", "m")  # sent at once, told after the slow one
    n.wait(60)
    assert out.read_text().split() == ["stalled", "finished"]
