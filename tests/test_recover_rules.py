"""The watcher's decisions, each piece alone with a fake clock: the restart budget and its backoff, the
wedge rule, the runner's reading of run/watch.json, and hosts.yaml `recover:`."""

from __future__ import annotations

import json

import pytest

from deploytool.errors import ConfigError
from remote.common.recover import (
    BACKOFF_CAP,
    Budget,
    Observation,
    RecoverSpec,
    WatchState,
    WedgeClock,
)
from remote.common.state import write_json
from remote.common.status import ProcessWatch
from remote.job.observe.watched import WatchView
from tests.conftest import base_job, write_config


def test_budget_backoff_doubles_to_the_cap_then_gives_up():
    b = Budget(RecoverSpec(max_restarts=3, window=3600, backoff=10))
    delays = []
    now = 1000.0
    while (d := b.failed(now)) is not None:
        delays.append(d)
        now += d
        assert b.restarting(now) == len(delays)
    assert delays == [10, 20, 40]  # three restarts, then the fourth death gives up
    big = Budget(RecoverSpec(max_restarts=20, backoff=100))
    for _ in range(5):
        big.restarting(0.0)
    assert big.failed(1.0) == BACKOFF_CAP


def test_budget_forgets_restarts_outside_the_window():
    b = Budget(RecoverSpec(max_restarts=2, window=100, backoff=1))
    b.restarting(0.0)
    b.restarting(10.0)
    assert b.failed(50.0) is None  # two restarts within 100 s: spent
    assert b.failed(105.0) == 2.0  # the first has left the window: one restart left, backoff 1*2
    assert b.attempt(111.0) == 1


def obs(now, gen=None, prompt=None, running=None, in_flight=0, models_ok=False, last=None):
    return Observation(now, gen, prompt, running, models_ok, in_flight, last)


def test_wedge_busy_with_frozen_counters():
    c = WedgeClock(after=60, ready_at=0.0)
    assert c.observe(obs(10, gen=100, prompt=50, running=4)) is None
    assert c.observe(obs(40, gen=100, prompt=50, running=4)) is None
    why = c.observe(obs(75, gen=100, prompt=50, running=4))
    assert why and "wedged" in why and "4 request(s)" in why


def test_wedge_never_for_a_busy_engine_that_moves_either_counter():
    c = WedgeClock(after=60, ready_at=0.0)
    for t in range(0, 600, 20):  # a long prefill: generation still, prompt tokens move
        assert c.observe(obs(t, gen=100, prompt=50 + t, running=1)) is None


def test_wedge_idle_time_never_counts_and_streams_count_as_progress():
    c = WedgeClock(after=60, ready_at=0.0)
    assert c.observe(obs(500, gen=100, prompt=50, running=0)) is None  # idle for 500 s
    assert c.observe(obs(530, gen=100, prompt=50, in_flight=8)) is None  # busy since 500
    # a stream delivered bytes at 580 although /metrics reads stale: not wedged at 600
    assert c.observe(obs(600, gen=100, prompt=50, in_flight=8, last=580.0)) is None
    assert c.observe(obs(645, gen=100, prompt=50, in_flight=8, last=580.0))


def test_wedge_when_nothing_answers_and_loading_never_counts():
    c = WedgeClock(after=60, ready_at=1000.0)  # ready at 1000: the load before it is not counted
    assert c.observe(obs(1030)) is None
    why = c.observe(obs(1061))
    assert why and "neither /metrics nor /v1/models" in why
    c2 = WedgeClock(after=60, ready_at=0.0)
    assert c2.observe(obs(100, models_ok=True)) is None  # /v1/models answers: alive, idle


def test_watch_view_follows_recovery_and_a_restarted_server(tmp_path):
    path = tmp_path / "watch.json"
    v = WatchView(path, every=0.0)
    assert v.poll(100.0) is False and v.server_recovering is False  # no file: nothing to do
    ws = WatchState(pid=1, updated_at=100.0, server=ProcessWatch(state="backoff"))
    write_json(path, ws.to_dict())
    assert v.poll(101.0) is False and v.server_recovering and v.recovering_at == 101.0
    ws.server, ws.server_ready_seq, ws.updated_at = ProcessWatch(state="watching"), 1, 102.0
    write_json(path, ws.to_dict())
    assert v.poll(103.0) is True and not v.server_recovering
    assert v.recovering_at == 101.0  # the runner's down_deadline counts from here, not the death
    assert v.poll(104.0) is False  # told once
    write_json(path, dict(ws.to_dict(), server={"state": "starting"}, updated_at=0.0))
    assert v.poll(105.0) is False and not v.server_recovering  # a stale file: the watcher is gone


def test_recover_config_defaults_overrides_and_errors(tmp_path):
    hosts = {"local": {"connect": "local"}, "gpu1": {"host": "g", "recover": {"backoff": 1}}}
    cfg = write_config(tmp_path, hosts, job=base_job(), recover={"wedged_after": 120})
    assert cfg.recover == RecoverSpec(wedged_after=120.0)
    assert cfg.recover_for("gpu1") == RecoverSpec(wedged_after=120.0, backoff=1.0)
    off = write_config(tmp_path, hosts, job=base_job(), recover=False)
    assert off.recover_for("local").enabled is False
    assert off.recover_for("gpu1").enabled and off.recover_for("gpu1").backoff == 1.0
    for bad, key in (
        ({"max_restart": 3}, "recover.max_restart: unknown key (did you mean 'max_restarts'?)"),
        ({"wedged_after": 0}, "recover.wedged_after: expected a number >= 1"),
        ({"on_boot": "yes"}, "recover.on_boot"),
        ("soon", "recover: expected a mapping"),
    ):
        with pytest.raises(ConfigError) as e:
            write_config(tmp_path, hosts, job=base_job(), recover=bad)
        assert str(e.value).startswith(key)


def test_watch_state_reads_back(tmp_path):
    ws = WatchState(
        pid=5, server=ProcessWatch(state="fatal", log=["CUDA error"]), server_ready_seq=2
    )
    (tmp_path / "w.json").write_text(json.dumps(ws.to_dict()))
    back = WatchState.read(tmp_path / "w.json")
    assert back == ws and back.server.recovering is False
    assert ProcessWatch(state="starting").recovering


def test_status_and_tail_say_recovering_gave_up_and_unsupervised():
    import io

    from rich.console import Console

    from deploytool.views import progress, render
    from remote.common.status import JobStatus, Supervision

    st = JobStatus(state="running", host="gpu1")
    st.supervision = Supervision(
        enabled=True,
        supervised=True,
        pid=7,
        server=ProcessWatch(
            state="backoff", why="the server process is gone", attempt=2, of=5, next_try_in_s=20
        ),
        runner=ProcessWatch(state="watching", restarts=1, last_cause="the runner (pid 9) died"),
        note="a reboot needs `invoke restart`",
    )
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=200, highlight=False), now=0)
    text = buf.getvalue()
    assert (
        "RECOVERING server: the server process is gone; attempt 2 of 5, next try in 0m20s" in text
    )
    assert "runner restarted 1x by the watcher; last cause: the runner (pid 9) died" in text
    line = progress.plain_line("gpu1", st, 0)
    assert (
        "RECOVERING server" in line and "reboot" not in line
    )  # tail's plain line: only what matters
    st.supervision = Supervision(
        enabled=True,
        server=ProcessWatch(
            state="fatal", why="gave up", log=["CUDA error: an illegal memory access"]
        ),
        note="unsupervised: the watcher is not running; `invoke restart` brings it back",
    )
    lines = [t for t, _ in progress.recovery_lines(st)]
    assert lines[0] == "GAVE UP on the server: gave up" and "illegal memory access" in lines[1]
    assert lines[-1].startswith("unsupervised")


def test_on_boot_unit_and_why_not_without_systemd(tmp_path, monkeypatch):
    from remote.common.jobspec import Paths
    from remote.host.facts import boot

    paths = Paths(tmp_path / "eagle3-train")
    text = boot.unit_text(paths, "/opt/venv/bin/python")
    assert f"ExecStart=/opt/venv/bin/python -m remote watch --root {paths.root}\n" in text
    assert f"WorkingDirectory={paths.root}/current" in text and "[Install]" in text
    monkeypatch.setattr(boot, "systemd_running", lambda: False)
    assert boot.install(paths, "/opt/venv/bin/python") == boot.why_not()
    assert "does not run systemd" in boot.why_not() and not boot.installed(paths)


def test_tail_reads_the_watcher_and_drops_a_recovery_nobody_carries_on():
    from deploytool.config import HostConfig
    from deploytool.ops.follow import WATCH_STALE_S, HostWatch
    from remote.common.status import JobStatus

    files = {}

    class Conn:
        remote_dir = "/r"

        def read_file(self, path):
            return files.get(path)

    ws = WatchState(
        pid=3,
        updated_at=500.0,
        server=ProcessWatch(state="backoff", attempt=1, of=5, next_try_at=512.0),
    )
    files["/r/run/watch.json"] = json.dumps(ws.to_dict())
    w = HostWatch(host=HostConfig(name="gpu1"), config=None, conn=Conn())
    w.status = JobStatus(state="running")
    w._watcher(w.conn, now=1000.0)
    sup = w.status.supervision
    assert sup.supervised and sup.server.recovering and sup.server.next_try_in_s == 12.0
    w._watcher(w.conn, now=1000.0 + WATCH_STALE_S + 1)  # the file has not changed since: stale
    assert not w.status.supervision.supervised and not w.status.supervision.server.recovering


def test_the_runner_comes_back_with_the_flags_it_had():
    from remote.common.protocol import GRACE_S, RunArgs

    argv = [
        "--max-samples",
        "7000",
        "--cap",
        "B2=2636",
        "--max-tokens",
        "10M",
        "--datasets",
        "B1,B2",
    ]
    a = RunArgs.from_argv(argv + ["--grace", "12", "--force"])
    back = RunArgs.from_argv(a.argv())
    assert back == a
    assert (back.max_samples, back.cap, back.max_tokens, back.datasets) == (
        7000,
        (("B2", 2636),),
        10_000_000,
        ("B1", "B2"),
    )
    assert back.grace == 12.0 and back.force is True
    assert RunArgs.from_argv([]).grace == GRACE_S  # the default, stated once in protocol.py
