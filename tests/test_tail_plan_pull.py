"""tail (rendering, end, reconnect, --log), plan (the worked example's caps), pull (only new bytes)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from rich.console import Console

from deploytool.connectors import connect
from deploytool.ops import follow
from deploytool.ops.deploy import deploy_host
from deploytool.ops.follow import HostWatch
from deploytool.ops.pull import Pulled, pull_host
from deploytool.views import progress
from deploytool.views import tail as tail_view
from remote.common import procinfo
from remote.common.jobspec import JobSpec, Paths
from remote.common.state import RunnerRecord, settle
from remote.common.status import JobView
from remote.common.wire import PROTOCOL
from remote.job.store.outputs import encode_record
from remote.queries.target_caps import plan
from tests.conftest import Sshd, base_job, outputs, ssh_host_entry, write_config, write_prompts


def watch(config, hosts, *, once=False, log=False, live=True, out=None, **kw):
    """What `invoke tail` runs (commands.tail): the view for its flags, the loop over the hosts."""
    view = tail_view.choose(out, once=once, log=log, live=live)
    return follow.watch(config, hosts, view, once=once, log=log, out=out, **kw)


NOW = 1_764_500_000.0


def spec_status(**overrides) -> dict:
    """The worked example mid-run: B1 complete, B2 at 1,639 of 7,000."""
    st = {
        "state": "running",
        "pid": 4242,
        "started_at": NOW - 3 * 3600,
        "updated_at": NOW - 1,
        "in_flight": 256,
        "concurrency": 256,
        "completion_tokens": 21_987_000,
        "tokens_per_s": 3200.0,
        "eta_s": 9 * 3600,
        "errors": 2,
        "retries": 5,
        "stalled": False,
        "engine": {"kind": "openai", "reachable": True},
        "datasets": {
            "B1": {
                "done": 7000,
                "target": 7000,
                "state": "complete",
                "completion_tokens": 15_770_000,
                "tokens_per_s": 0,
                "eta_s": 0,
                "records": 7000,
                "new_records": 0,
                "finish_length": 192,  # records of earlier runs count: the share is the job's
            },
            "B2": {
                "done": 1639,
                "target": 7000,
                "state": "running",
                "completion_tokens": 6_217_000,
                "tokens_per_s": 3200,
                "eta_s": 6 * 3600 + 21 * 60,
                "records": 1639,
                "new_records": 100,
                "finish_length": 67,
            },
            "B3": {
                "done": 0,
                "target": 7000,
                "state": "pending",
                "completion_tokens": 0,
                "tokens_per_s": 0,
                "eta_s": None,
                "new_records": 0,
                "finish_length": 0,
            },
        },
    }
    st.update(overrides)
    return st


def typed(**overrides) -> JobView:
    return JobView.from_dict(spec_status(**overrides))


def render(obj, width=100) -> str:
    buf = io.StringIO()
    Console(file=buf, force_terminal=True, width=width, color_system=None).print(obj)
    return buf.getvalue()


def test_records_with_no_answer_text_are_said_in_the_health_line():
    st = typed()
    assert "no answer text" not in progress.health(st, NOW)[0]
    st.datasets["B2"].empty, st.datasets["B2"].new_records = 76, 100
    line, bad = progress.health(st, NOW)
    assert "no answer text: 76 of this runner's 100 records (export leaves them out" in line and bad


def test_tail_view_shows_the_right_figures():
    text = render(progress.view({"gpu1": typed()}, {}, now=NOW))
    assert "gpu1: running" in text and "in flight 256/256" in text
    assert "7,000/7,000" in text and "1,639/7,000" in text and "0/7,000" in text
    assert "15.8M" in text and "6.2M" in text  # per-dataset response tokens
    assert "6h21m" in text  # B2's ETA
    assert "total 22.0M tokens · 3.2k tok/s · ETA 9h00m · elapsed 3h00m" in text
    assert "errors 2" in text and "finish=length 3.0%" in text and "retries 5" in text


def test_tail_view_flags_trouble():
    st = typed(
        stalled=True,
        engine={
            "kind": "openai",
            "reachable": False,
            "down_since": NOW - 600,
            "last_error": "cannot connect",
        },
        updated_at=NOW - 120,
    )
    text = render(
        progress.view({"gpu1": st}, {"gpu1": "connection lost; reconnecting in 2s"}, now=NOW)
    )
    assert "ENGINE UNREACHABLE for 10m00s: cannot connect" in text
    assert "STALLED" in text and "status not updated for 2m00s" in text
    assert "reconnecting in 2s" in text


def test_multi_host_view_has_grand_total():
    text = render(progress.view({"a": typed(), "b": typed(eta_s=3600)}, {}, now=NOW))
    assert "a: running" in text and "b: running" in text
    assert "all hosts: 44.0M tokens · 6.4k tok/s · ETA 9h00m" in text


def _local_host(tmp_path, status: dict | None, *, deployed=True, runner=True):
    """A `local` host, deployed, its status file `status`, and (`runner`) a live process as its
    runner: this test's own, which the host finds by its pid file as it would the runner."""
    root = tmp_path / "host"
    (root / "run").mkdir(parents=True)
    write_prompts(tmp_path / "data" / "prompts" / "B1.jsonl", 3)
    cfg = write_config(tmp_path, {"local": {"connect": "local", "remote_dir": str(root)}})
    if deployed:
        with connect(cfg.hosts["local"], cfg) as conn:
            deploy_host(conn, cfg)
    if status is not None:
        (root / "run" / "status.json").write_text(json.dumps(status))
    if runner:
        live_runner(Paths(root))
    return cfg, root


def live_runner(paths: Paths) -> None:
    pid = os.getpid()
    RunnerRecord(pid=pid, start_time=procinfo.start_time(pid), token="t").write(paths.pidfile)


class FakeClock:
    def __init__(self, t=NOW):
        self.t = t

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


@pytest.mark.parametrize("state, code", [("finished", 0), ("failed", 1), ("stopped", 1)])
def test_tail_ends_with_the_jobs_exit_code(tmp_path, state, code):
    cfg, root = _local_host(tmp_path, spec_status())
    clock = FakeClock()
    buf = io.StringIO()
    polls = []

    def sleep(s):
        clock.sleep(s)
        polls.append(1)
        if len(polls) == 3:  # the job ends while we watch
            (root / "run" / "status.json").write_text(
                json.dumps(spec_status(state=state, updated_at=clock.t))
            )

    rc = watch(
        cfg,
        list(cfg.hosts.values()),
        live=False,
        out=Console(file=buf, width=200),
        clock=clock,
        sleep=sleep,
    )
    assert rc == code
    lines = buf.getvalue().splitlines()
    assert len(lines) == 4 and "running" in lines[0] and state in lines[-1]


@pytest.mark.parametrize("state, code", [("running", 0), ("finished", 0), ("stopped", 1)])
def test_tail_once_answers_as_the_live_tail_does(tmp_path, state, code):
    cfg, root = _local_host(tmp_path, spec_status(state=state))
    out = Console(file=io.StringIO(), width=200)
    assert (
        watch(cfg, list(cfg.hosts.values()), once=True, live=False, out=out, clock=FakeClock())
        == code
    )


def test_tail_once_and_live_render(tmp_path):
    cfg, root = _local_host(tmp_path, spec_status(state="finished"))
    buf = io.StringIO()
    con = Console(file=buf, force_terminal=True, width=100, color_system=None)
    assert (
        watch(cfg, list(cfg.hosts.values()), once=True, live=True, out=con, clock=FakeClock()) == 0
    )
    assert "1,639/7,000" in buf.getvalue()
    buf2 = io.StringIO()
    con2 = Console(file=buf2, force_terminal=True, width=100, color_system=None)
    assert (
        watch(
            cfg,
            list(cfg.hosts.values()),
            live=True,
            out=con2,
            clock=FakeClock(),
            sleep=lambda s: None,
        )
        == 0
    )
    assert "finished" in buf2.getvalue()


def test_tail_notices_a_runner_killed_without_status(tmp_path):
    """status.json still says running, but nobody updates it: tail asks the host and ends."""
    cfg, root = _local_host(tmp_path, spec_status(updated_at=NOW - 100), runner=False)
    buf = io.StringIO()
    rc = watch(
        cfg,
        list(cfg.hosts.values()),
        live=False,
        out=Console(file=buf, width=300),
        clock=FakeClock(),
        sleep=lambda s: None,
        max_seconds=5,
    )
    assert rc == 1 and "local: died |" in buf.getvalue()  # killed: no stop of anyone's


def test_tail_sees_the_job_as_status_does_the_watcher_gone_included(tmp_path):
    """One view: tail shows the host's own look at the watcher, as `invoke status` does (tail
    reading the files itself could not tell a watcher that is gone)."""
    from deploytool.ops.control import job_status
    from remote.host.facts import intent

    cfg, root = _local_host(tmp_path, spec_status(updated_at=NOW))
    intent.change(Paths(root), runner={"wanted": True})  # no watcher runs
    w = HostWatch(cfg.hosts["local"], cfg)
    w.poll_status(NOW)
    with connect(cfg.hosts["local"], cfg) as conn:
        status = job_status(conn)
    w.close()
    assert w.status.supervision.note.startswith("unsupervised: the watcher is gone")
    assert w.status.supervision == status.supervision and w.status.runner.alive


def test_tail_follows_a_runner_the_watcher_starts_again_and_ends_at_its_give_up(tmp_path):
    """A runner killed with -9 that a live watcher keeps is not the job's end: tail goes on
    through the recovery, and ends (1) once the watcher gives up and the job is failed."""
    import time

    from remote.common.recover import WatchState
    from remote.common.state import WatcherRecord
    from remote.common.status import JobState, ProcessWatch
    from remote.host.facts import intent

    now = time.time()
    cfg, root = _local_host(tmp_path, spec_status(updated_at=now), runner=False)  # killed
    paths = Paths(root)
    intent.change(paths, runner={"wanted": True})
    me = os.getpid()  # stands in for the live watcher
    WatcherRecord(pid=me, start_time=procinfo.start_time(me), token="w", started_at=now).write(
        paths.watcher_pid
    )
    backoff = ProcessWatch(state="backoff", attempt=2, of=5, next_try_at=now + 10)
    WatchState(pid=me, updated_at=now, ticked_at=now, runner=backoff).write(paths.watch_state)
    clock, buf, looks = FakeClock(now), io.StringIO(), []

    def sleep(s):
        clock.sleep(s)
        looks.append(s)
        if len(looks) == 3:  # the watcher gives up
            fatal = ProcessWatch(state="fatal", why="died again")
            WatchState(pid=me, updated_at=time.time(), runner=fatal).write(paths.watch_state)
            settle(paths, JobState.FAILED, "the runner died again")

    out = Console(file=buf, width=300)
    rc = watch(cfg, list(cfg.hosts.values()), live=False, out=out, clock=clock, sleep=sleep)
    lines = buf.getvalue().splitlines()
    assert rc == 1 and len(looks) == 3, lines
    # said as the watcher's work it is, not as an end (a newcomer read `stopped` as one to restart)
    assert " recovering | " in lines[0] and "RECOVERING runner" in lines[0]
    assert "failed" in lines[-1] and "the runner died again" in lines[-1]


def test_a_look_whose_host_process_was_killed_says_so_and_the_next_starts_anew(tmp_path):
    """kill -9 of the kept `ctl status` on the host: that look is an error, the next one works."""
    import signal

    from deploytool.errors import ConnectError, RemoteError
    from deploytool.ops.control import Asking
    from remote.common.protocol import CtlStatus

    cfg, root = _local_host(tmp_path, spec_status(updated_at=NOW))
    with connect(cfg.hosts["local"], cfg) as conn:
        looks = Asking(conn, CtlStatus(again=True))
        assert looks.ask().state == "running"  # asked once
        assert looks.ask().state == "running"  # the kept process's first answer
        os.kill(looks.proc.proc.pid, signal.SIGKILL)
        with pytest.raises(RemoteError, match="failed"):
            looks.ask()
        assert looks.ask().state == "running" and looks.ask().state == "running"
        # the connection drops under a look: that look is an error, the next one starts anew
        proc, write = looks.proc, looks.proc.write

        def dropped(data):
            proc.write = write
            os.kill(proc.proc.pid, signal.SIGKILL)
            raise ConnectError("connection to local lost: EOF")

        proc.write = dropped
        with pytest.raises(ConnectError):
            looks.ask()
        assert looks.ask().state == "running" and looks.ask().state == "running"
        looks.close()


def test_tail_of_a_host_running_the_release_before_says_to_deploy(tmp_path):
    """A host of the release before reads a request to the end of its input: tail must not wait
    on it for ever, and says what to do."""
    cfg, root = _local_host(tmp_path, spec_status(updated_at=NOW))
    rel = root / "current" / "remote"
    cli, wire = rel / "cli.py", rel / "common" / "wire.py"
    cli.write_text(cli.read_text().replace("stdin.readline()", "stdin.read()"))
    wire.write_text(
        wire.read_text().replace(f"PROTOCOL = {PROTOCOL}", f"PROTOCOL = {PROTOCOL - 1}")
    )
    buf = io.StringIO()
    rc = watch(cfg, list(cfg.hosts.values()), live=False, out=Console(file=buf, width=300))
    assert rc == 1 and "run `invoke deploy`" in buf.getvalue(), buf.getvalue()


def test_tail_killed_with_9_leaves_nothing_running_on_the_host(tmp_path):
    """tail's `ctl status` kept running on the host ends when tail is gone, kill -9 included."""
    import signal
    import subprocess

    from tests.conftest import REPO, piped_env, wait_for
    from tests.helpers.as_typed import INVOKE

    cfg, root = _local_host(tmp_path, spec_status(updated_at=NOW))
    env = dict(piped_env(), DEPLOYTOOL_CONFIG=str(tmp_path / "hosts.yaml"))
    tail = subprocess.Popen([INVOKE, "tail"], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert "running" in tail.stdout.readline()  # its first look was answered
        asking = wait_for(
            lambda: [p for p in procinfo.all_pids() if procinfo.ppid(p) == tail.pid],
            what="tail's process on the host",
        )
        started = {p: procinfo.start_time(p) for p in asking}
        tail.send_signal(signal.SIGKILL)
        tail.wait()
        wait_for(
            lambda: all(procinfo.start_time(p) != t for p, t in started.items()),
            what="the host's process gone",
        )
    finally:
        tail.kill()
        tail.wait()


def test_tail_log_starts_at_the_logs_last_lines_then_follows_every_new_one(tmp_path):
    """`invoke tail --log` after a day printed runner.log from its first line: a flood."""
    from tests.helpers.as_typed import ok

    cfg, root = _local_host(tmp_path, spec_status(state="finished"))
    (root / "logs").mkdir(exist_ok=True)
    log = root / "logs" / "runner.log"
    written = [f"2026-11-30 12:00:00 line {i} " + "x" * 300 for i in range(5000)]  # past a window
    log.write_text("".join(line + "\n" for line in written))
    last = written[-follow.TAIL_LINES :]
    assert ok("invoke tail --log", cfg.path).splitlines() == last  # the job has ended: it stops

    w = HostWatch(cfg.hosts["local"], cfg)
    assert w.poll_log(NOW) == last
    more = [f"2026-11-30 12:00:01 more {i}" for i in range(3 * follow.TAIL_LINES)]
    with open(log, "a") as f:
        f.write("".join(line + "\n" for line in more))
    assert w.poll_log(NOW + 1) == more  # following: every new line, not only the last ones
    w.close()


def test_tail_log_reads_a_log_that_appears_while_it_watches_from_its_first_line(tmp_path):
    cfg, root = _local_host(tmp_path, spec_status())
    w = HostWatch(cfg.hosts["local"], cfg)
    assert w.poll_log(NOW) == []  # no log yet
    (root / "logs").mkdir(exist_ok=True)
    written = [f"line {i}" for i in range(2 * follow.TAIL_LINES)]
    (root / "logs" / "runner.log").write_text("".join(line + "\n" for line in written))
    assert w.poll_log(NOW + 1) == written  # all of it: none was shown before
    w.close()


@pytest.fixture
def own_sshd(ssh_rig, tmp_path):
    """An sshd of this test's own, so it can be restarted mid-tail."""
    root = tmp_path / "sshd"
    root.mkdir()
    sshd = Sshd(root, ssh_rig["authorized"], host_key=ssh_rig["sshd"].host_key).start()
    kh = tmp_path / "kh"
    kh.write_text(sshd.known_hosts_line())
    yield sshd, kh
    sshd.stop()


def test_tail_survives_sshd_restart_and_log_lines_exactly_once(ssh_rig, own_sshd, tmp_path):
    sshd, kh = own_sshd
    host_dir = tmp_path / "host"
    (host_dir / "run").mkdir(parents=True)
    (host_dir / "logs").mkdir()
    log = host_dir / "logs" / "runner.log"
    write_prompts(tmp_path / "data" / "prompts" / "B1.jsonl", 3)
    cfg = write_config(
        tmp_path, {"gpu": ssh_host_entry(ssh_rig, host_dir, port=sshd.port, known_hosts=str(kh))}
    )
    with connect(cfg.hosts["gpu"], cfg) as conn:
        deploy_host(conn, cfg)
    (host_dir / "run" / "status.json").write_text(json.dumps(spec_status()))
    live_runner(Paths(host_dir))
    w = HostWatch(cfg.hosts["gpu"], cfg)
    seen: list[str] = []
    written: list[str] = []

    def write_lines(n):
        with open(log, "a") as f:
            for _ in range(n):
                line = f"2026-11-30 12:00:00 line {len(written)}"
                written.append(line)
                f.write(line + "\n")

    t = NOW
    write_lines(5)
    with open(log, "a") as f:
        f.write("2026-11-30 12:00:00 half a li")  # the runner is mid-write: not shown yet
    w.poll_status(t)
    seen += w.poll_log(t)
    assert w.status.state == "running" and seen == written
    with open(log, "a") as f:
        f.write("ne\n")
    written.append("2026-11-30 12:00:00 half a line")
    sshd.stop()  # the connection drops
    write_lines(3)
    w.poll_status(t + 1)
    assert "connection lost" in (w.note or "") and w.status.state == "running"  # last snapshot kept
    seen += w.poll_log(t + 1)  # still in backoff: nothing, nothing lost
    restarted = Sshd(
        sshd.root, ssh_rig["authorized"], host_key=sshd.host_key, port=sshd.port
    ).start()
    try:
        (host_dir / "run" / "status.json").write_text(json.dumps(spec_status(state="finished")))
        write_lines(2)
        w.poll_status(t + 60)
        assert w.status.state == "finished" and w.note is None
        seen += w.poll_log(t + 60)
        # rotation: the log is renamed to .1 after more lines were written, and a new one starts
        write_lines(2)
        os.rename(log, str(log) + ".1")
        write_lines(3)
        seen += w.poll_log(t + 61)
        assert seen == written  # every line exactly once, in order
        w.close()
    finally:
        restarted.stop()


# ------------------------------------------------------------------ plan


def _records(path: Path, ds: str, n: int, tokens: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        for i in range(n):
            f.write(
                encode_record(
                    {
                        "id": f"{ds}-{i:06d}",
                        "dataset": ds,
                        "index": i,
                        "finish_reason": "stop",
                        "usage": {"prompt_tokens": 1, "completion_tokens": tokens},
                    }
                )
            )


def test_plan_reproduces_spec_caps(tmp_path):
    root = tmp_path / "host"
    est = {
        "B1": 1577,
        "B2": 4116,
        "B3": 2000,
        "B4": 4000,
        "B5": 4000,
        "B6": 1500,
        "B7": 1500,
        "B8": 8000,
    }
    (tmp_path / "job.json").write_text(
        json.dumps(
            {
                "datasets": {
                    d: {"prompts": f"data/prompts/{d}.jsonl", "est_tokens": e}
                    for d, e in est.items()
                }
            }
        )
    )
    job = JobSpec.load(tmp_path / "job.json")
    write_prompts(root / "data" / "prompts" / "B1.jsonl", 10_000, "B1")
    write_prompts(root / "data" / "prompts" / "B2.jsonl", 14_714, "B2")
    _records(outputs(root) / "B1.jsonl", "B1", 10_000, 1577)
    # measured 3,793 beats the 4,116 estimate
    _records(outputs(root) / "B2.jsonl", "B2", 1639, 3793)
    rows, _ = plan(Paths(root), job, 10_000_000)
    caps = {d: r["cap"] for d, r in rows.items()}
    assert caps == {
        "B1": 6341,
        "B2": 2636,
        "B3": 5000,
        "B4": 2500,
        "B5": 2500,
        "B6": 6666,
        "B7": 6666,
        "B8": 1250,
    }
    assert rows["B2"]["source"].startswith("measured") and rows["B8"]["source"].startswith(
        "est_tokens"
    )
    assert rows["B2"]["done"] == 1639 and rows["B2"]["todo"] == 2636 - 1639
    assert rows["B1"]["todo"] == 0


def test_plan_cli_and_apply_on_local_host(tmp_path):
    import subprocess
    import sys

    project = tmp_path / "p"
    project.mkdir()
    write_prompts(project / "data" / "prompts" / "B1.jsonl", 30)
    cfg = write_config(project, {"local": {"connect": "local", "remote_dir": ".host"}})
    base = [sys.executable, "-m", "deploytool", "--config", str(cfg.path)]
    for line in (["deploy"], ["restart", "--max-samples", "3"], ["tail"]):
        assert subprocess.run(base + line, capture_output=True).returncode == 0, line
    res = subprocess.run(
        base + ["plan", "--tokens-per-dataset", "15k", "--tokens-per-s", "1000", "--apply"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    # 15,000 // 1,577
    assert "B1" in res.stdout and "9" in res.stdout and "applying caps B1=9" in res.stdout
    assert "B1's target goes up (3 → 9 prompts)" in res.stdout  # said as a restart says it
    st = json.loads((project / ".host" / "run" / "status.json").read_text())
    assert st["datasets"]["B1"]["target"] == 9
    bad = subprocess.run(
        base + ["plan", "--tokens-per-dataset", "lots"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "token count" in bad.stderr


def test_plan_counts_the_records_in_its_target_and_says_the_estimate_each_row_used(tmp_path):
    """32 records of B1 (a job capped at 12 after all were made): plan read 'records 30' where
    status read 12/12, and used est_tokens 8,000 over the 6,432 measured, saying 'estimate'."""
    from tests.helpers.as_typed import ok

    project = tmp_path / "p"
    write_prompts(project / "data" / "prompts" / "B1.jsonl", 32, "B1")
    write_prompts(project / "data" / "prompts" / "B2.jsonl", 60, "B2")
    job = base_job(
        datasets={
            "B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": 8000},
            "B2": {"prompts": "data/prompts/B2.jsonl", "est_tokens": 100},
        }
    )
    cfg = write_config(
        project, {"box": {"connect": "local", "remote_dir": str(tmp_path / "h")}}, job
    )
    ok("invoke deploy", cfg.path)
    _records(outputs(tmp_path / "h") / "B1.jsonl", "B1", 32, 6432)
    _records(outputs(tmp_path / "h") / "B2.jsonl", "B2", 50, 300)
    out = ok("invoke plan --tokens-per-dataset 96k --tokens-per-s 1000", cfg.path)
    rows = {
        line.split()[0]: line for line in out.splitlines() if line.split()[:1] in (["B1"], ["B2"])
    }
    b1 = " ".join(rows["B1"].split())
    assert b1.startswith(
        "B1 12/12 +20 beyond the cap 8,000 est_tokens (32 records, mean 6,432: "
    ), b1
    b2 = " ".join(rows["B2"].split())
    assert b2.startswith("B2 50/60 300 measured mean of 50 records 320* 10 "), b2


# ------------------------------------------------------------------ pull


@pytest.fixture
def pulled(ssh_rig, tmp_path):
    host_dir = tmp_path / "host"
    project = tmp_path / "p"
    project.mkdir()
    write_prompts(project / "data" / "prompts" / "B1.jsonl", 3)
    cfg = write_config(project, {"gpu": ssh_host_entry(ssh_rig, host_dir)}, job=base_job())
    conn = connect(cfg.hosts["gpu"], cfg)
    deploy_host(conn, cfg)
    yield conn, outputs(host_dir), tmp_path / "local"
    conn.close()


def test_pull_sends_only_new_bytes(pulled):
    conn, remote, local = pulled
    out = remote / "B1.jsonl"
    _records(out, "B1", 2000, 100)
    (remote / "B1.meta.json").write_text('{"model": "m"}')
    r1 = pull_host(conn, local)
    assert (local / "gpu" / "B1.jsonl").read_bytes() == out.read_bytes()
    assert r1.files["B1.jsonl"].bytes == out.stat().st_size
    before = out.stat().st_size
    _records(out, "B1", 100, 100)
    with open(out, "ab") as f:
        f.write(b'{"id": "torn')  # the runner is mid-write: only whole lines come over
    r2 = pull_host(conn, local)
    new = out.stat().st_size - before
    assert r2.files["B1.jsonl"] == Pulled("appended", new)
    assert r2.files["B1.meta.json"].action == "unchanged"
    assert (local / "gpu" / "B1.jsonl").read_bytes() == out.read_bytes()[
        : out.read_bytes().rfind(b"\n") + 1
    ]
    r3 = pull_host(conn, local)
    # only the still-torn tail is looked at again
    assert r3.files["B1.jsonl"].bytes == len(b'{"id": "torn')


def test_pull_refuses_when_prefix_differs_and_refetches_on_request(pulled):
    conn, remote, local = pulled
    _records(remote / "B1.jsonl", "B1", 50, 100)
    pull_host(conn, local)
    mine = local / "gpu" / "B1.jsonl"
    data = bytearray(mine.read_bytes())
    data[-20] = ord("X")  # the local copy no longer matches the host's
    mine.write_bytes(bytes(data))
    _records(remote / "B1.jsonl", "B1", 5, 100)
    r = pull_host(conn, local)
    assert r.refused == ["B1.jsonl"] and mine.read_bytes() == bytes(data)  # left as it was
    r = pull_host(conn, local, refetch=True)
    assert r.files["B1.jsonl"].action == "re-fetched"
    assert mine.read_bytes() == (remote / "B1.jsonl").read_bytes()


def test_pull_repairs_a_local_copy_torn_by_a_killed_pull(pulled):
    conn, remote, local = pulled
    _records(remote / "B1.jsonl", "B1", 20, 100)
    pull_host(conn, local)
    mine = local / "gpu" / "B1.jsonl"
    good = mine.read_bytes()
    with open(mine, "ab") as f:  # what a pull killed mid-append leaves
        f.write((remote / "B1.jsonl").read_bytes()[:30])
    _records(remote / "B1.jsonl", "B1", 3, 100)
    pull_host(conn, local)
    assert mine.read_bytes() == (remote / "B1.jsonl").read_bytes() and mine.read_bytes().startswith(
        good
    )


def test_tail_without_any_run_says_so_and_ends_naming_the_next_command(tmp_path):
    cfg, root = _local_host(tmp_path, None, deployed=False, runner=False)

    def tail() -> tuple[int, str]:
        buf = io.StringIO()
        rc = watch(
            cfg,
            list(cfg.hosts.values()),
            live=False,
            out=Console(file=buf, width=300),
            clock=FakeClock(),
            sleep=lambda s: None,
        )
        return rc, buf.getvalue()

    rc, answer = tail()  # nothing deployed: a restart would only say to deploy
    assert rc == 1 and "nothing deployed" in answer and "`invoke deploy` first" in answer, answer
    with connect(cfg.hosts["local"], cfg) as conn:
        deploy_host(conn, cfg)  # deployed, never started
    rc, answer = tail()
    assert rc == 1 and "no run/status.json yet" in answer and "`invoke restart`" in answer, answer
