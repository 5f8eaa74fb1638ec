"""A server's engine processes, on real processes: a launcher's children recorded once seen, a dead
one named, what a launcher killed -9 leaves behind (its session, and a worker that left the session
but kept the token) found and stopped, and a session that took a dead server's pid left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

from remote.common import procinfo
from remote.common.jobspec import SERVER_TOKEN_ENV, Paths
from remote.common.state import ServerRecord
from remote.host.facts import engines
from tests.conftest import kill_if_same, wait_for

# a launcher like `vllm serve`: two engine children in its session, one worker in a session of its own
LAUNCHER = """
import os, subprocess, sys, time
code = "import time; time.sleep(60)"
kids = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]
loner = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
open(sys.argv[1], "w").write(" ".join(str(k.pid) for k in kids + [loner]))
time.sleep(60)
"""


def launch(tmp_path, token):
    out = tmp_path / "kids"
    env = {**os.environ, SERVER_TOKEN_ENV: token}
    p = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(out)], start_new_session=True, env=env
    )
    wait_for(lambda: out.exists() and out.read_text(), what="the launcher's children")
    *kids, loner = (int(x) for x in out.read_text().split())
    rec = ServerRecord(pid=p.pid, start_time=procinfo.start_time(p.pid), token=token, sid=p.pid)
    return p, rec, kids, loner


def test_children_are_recorded_once_and_a_dead_one_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(engines, "SETTLED_S", 0.0)
    paths = Paths(tmp_path)
    paths.ensure()
    p, rec, kids, loner = launch(tmp_path, uuid.uuid4().hex)
    started = {pid: procinfo.start_time(pid) for pid in [p.pid, *kids, loner]}
    try:
        rec = engines.watch(paths, rec)
        assert sorted(e.pid for e in rec.engines) == sorted(kids)  # the loner left the session
        assert sorted(e.pid for e in ServerRecord.read(paths.server_pid).engines) == sorted(kids)
        assert engines.watch(paths, rec).engines == rec.engines  # seen once, recorded once
        os.kill(kids[0], signal.SIGKILL)
        wait_for(lambda: not procinfo.alive(kids[0]), what="the engine gone")
        assert [g.pid for g in engines.gone(rec)] == [kids[0]]
    finally:
        kill_if_same(started)
        p.wait()


def test_what_a_launcher_killed_hard_leaves_is_found_and_stopped(tmp_path, monkeypatch):
    paths = Paths(tmp_path)
    paths.ensure()
    p, rec, kids, loner = launch(tmp_path, uuid.uuid4().hex)
    rec.write(paths.server_pid)
    assert engines.leftovers(paths) == []  # the launcher lives: nothing is left over
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    found = engines.remove_leftovers(paths, grace=2.0)
    assert {f.pid for f in found} == {*kids, loner}
    wait_for(lambda: not any(procinfo.alive(k) for k in (*kids, loner)), what="the leftovers gone")


def test_a_session_that_took_a_dead_servers_pid_is_not_its_leftovers(tmp_path):
    # the server (pid P) died and its session emptied; P went to a new process that began a session
    # of its own (an SSH login): what runs in it bears the server's session id and started after it
    paths = Paths(tmp_path)
    paths.ensure()
    p, rec, kids, loner = launch(tmp_path, uuid.uuid4().hex)
    started = {pid: procinfo.start_time(pid) for pid in [p.pid, *kids, loner]}
    try:
        ServerRecord(
            pid=p.pid, start_time=started[p.pid] - 1, token=uuid.uuid4().hex, sid=p.pid
        ).write(paths.server_pid)
        assert engines.leftovers(paths) == [] and engines.remove_leftovers(paths, grace=0) == []
        assert all(procinfo.start_time(pid) == st for pid, st in started.items())  # all alive
    finally:
        kill_if_same(started)
        p.wait()
