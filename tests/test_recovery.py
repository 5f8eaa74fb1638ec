"""A job that heals itself, over the real sshd with a stand-in `vllm` (tests/fake_vllm.py): the host's
watcher restarts a server that was killed, exited 0, lost its engine, wedged or keeps dying at start,
and a runner that was killed; it obeys stop and server.stop; killing it never stops the job."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from deploytool.config import load_config
from deploytool.connectors import connect
from deploytool.ops import control, server
from deploytool.ops.deploy import deploy_host
from remote.common import procinfo
from remote.common.jobspec import Paths
from remote.common.recover import RecoverSpec
from remote.common.state import EngineProcess, ProcessRecord
from remote.host.facts import intent
from tests.conftest import (
    base_job,
    cli,
    free_port,
    outputs,
    records,
    runner_time_passes,
    ssh_host_entry,
    wait_for,
    write_config,
    write_prompts,
)
from tests.helpers.stand_ins import fake_vllm

N = 48
FAST = {"backoff": 0.2, "max_restarts": 3, "wedged_after": 2.0, "window": 3600}


class Rig:
    def __init__(
        self, tmp_path: Path, ssh_rig, server_args=(), recover=None, answer_delay=0.25, n=N
    ):
        self.n = n
        self.tmp = tmp_path
        self.root = tmp_path / "host"
        project = tmp_path / "p"
        project.mkdir()
        write_prompts(project / "data" / "prompts" / "B1.jsonl", n)
        self.port = free_port()
        self.events = tmp_path / "events.log"
        job = base_job(
            engine={
                "kind": "openai",
                "base_url": f"http://127.0.0.1:{self.port}/v1",
                "model": "kimi",
                "concurrency": 4,
                "retry_base": 0.05,
                "down_deadline": 3.0,  # shorter than a recovery: the runner must wait for it
                "metrics_interval": 0,
            }
        )
        job["notify"] = {
            "command": f'echo "$DEPLOYTOOL_EVENT $DEPLOYTOOL_MESSAGE" >> {self.events}'
        }
        self.cfg = write_config(
            project,
            {"gpu": ssh_host_entry(ssh_rig, self.root)},
            job=job,
            server={
                "command": str(fake_vllm(tmp_path)),
                "model": "kimi",
                "port": self.port,
                "args": [
                    "--fake-delay",
                    "0.3",
                    "--fake-engine",
                    "1",
                    "--fake-answer-delay",
                    str(answer_delay),
                    *server_args,
                ],
                "ready_timeout": 30,
            },
            recover=FAST if recover is None else recover,
        )
        self.conn = connect(self.cfg.hosts["gpu"], self.cfg)
        deploy_host(self.conn, self.cfg)
        self.recover = self.cfg.recover_for("gpu")

    def start(self, server_up=True):
        if server_up:
            server.start(self.conn, self.cfg.server, poll=0.1, recover=self.recover)
        flags = control.parse_run_flags(self.cfg)
        return control.restart(self.conn, flags, recover=self.recover)

    def pid(self, name: str) -> dict:
        return json.loads((self.root / "run" / name).read_text())

    def watch(self) -> dict:
        try:
            return json.loads((self.root / "run" / "watch.json").read_text())
        except (OSError, ValueError):
            return {}

    def status(self) -> dict:
        return json.loads((self.root / "run" / "status.json").read_text())

    def wait_records(self, n: int, timeout: float = 30):
        wait_for(lambda: len(records(self.root, "B1")) >= n, timeout, what=f"{n} records")

    def finished(self, timeout: float = 60):
        wait_for(
            lambda: (
                self.status()["state"] == "finished"
                and not ProcessRecord.live(self.root / "run" / "runner.pid")
            ),
            timeout,
            what="the job to finish",
        )
        ids = [r["id"] for r in records(self.root, "B1")]
        assert (
            len(ids) == self.n and len(set(ids)) == self.n
        )  # every prompt once: none lost, none twice
        errors = outputs(self.root) / "B1.errors.jsonl"
        assert not errors.exists() or not errors.read_text().strip()

    def event_lines(self) -> list[str]:
        return self.events.read_text().splitlines() if self.events.exists() else []

    def close(self):
        server.stop(self.conn, grace=0)
        control.stop(self.conn, grace=0)
        self.conn.close()


@pytest.fixture
def rig(tmp_path, ssh_rig):
    made = []

    def make(*args, **kw):
        r = Rig(tmp_path, ssh_rig, *args, **kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def server_processes(rec: dict) -> list[int]:
    """Every process of a server as recorded: its session, and its engine children."""
    pids = set(procinfo.session_members(rec.get("sid", rec["pid"]), since=rec["start_time"]))
    return sorted(p for p in pids if procinfo.alive(p) and procinfo.state(p) not in ("Z", "X"))


def watcher_log(r: Rig) -> str:
    return (r.root / "logs" / "watcher.log").read_text()


def restarted(r: Rig, what: str, n: int = 1, timeout: float = 30) -> dict:
    return wait_for(
        lambda: (
            (r.watch().get(what) or {}).get("restarts", 0) >= n
            and r.watch()[what]["state"] == "watching"
            and r.watch()
        ),
        timeout,
        what=f"{what} restarted {n} time(s)",
    )


@pytest.mark.slow
def test_server_killed_9_is_restarted_its_leftovers_removed_every_prompt_once(rig):
    # loading takes longer than the job's down_deadline (3 s): the runner must wait for the watcher
    r = rig(server_args=["--fake-delay", "4"])
    r.start()
    r.wait_records(8)
    old = r.pid("server.pid")
    left = {p: procinfo.start_time(p) for p in server_processes(old)}
    assert (
        len(left) >= 2
    )  # the launcher and its engine (the workers left the session, as vLLM's do)
    os.kill(old["pid"], signal.SIGKILL)  # the API server dies hard; its engine and workers stay
    w = restarted(r, "server")
    assert "gone" in w["server"]["last_cause"]
    new = r.pid("server.pid")
    assert new["pid"] != old["pid"] and new["by"] == "watcher" and new.get("ready_at")
    still = [p for p, st in left.items() if procinfo.alive(p) and procinfo.start_time(p) == st]
    assert not still  # the old engine, re-parented to init, was removed before the new start
    r.finished()
    lines = r.event_lines()
    assert any(e.startswith("server_restarted ") and "attempt 1 of 3" in e for e in lines), lines
    assert not any(e.startswith("failed") for e in lines)


@pytest.mark.parametrize("how", ["exit0", "engine_gone", "wedged"])
def test_server_deaths_that_look_alive_or_clean(rig, tmp_path, how):
    leave = tmp_path / "leave"  # exit0: the server exits 0 once the job has made records
    args = ["--fake-exit-once", str(tmp_path / "exited"), "--fake-exit-when", str(leave)]
    r = rig(server_args=args if how == "exit0" else [])
    r.start()
    r.wait_records(4)
    if how == "exit0":
        leave.touch()
    elif how == "engine_gone":
        rec = wait_for(lambda: r.pid("server.pid").get("engines"), 15, what="engines recorded")
        os.kill(rec[0]["pid"], signal.SIGKILL)  # the launcher lives on, serving nothing real
    elif how == "wedged":
        rec = wait_for(lambda: r.pid("server.pid").get("engines"), 15, what="engines recorded")
        stopped = rec[0]
        os.kill(stopped["pid"], signal.SIGSTOP)  # its HTTP side still answers /v1/models
        code, _ = server_get(r.port, "/v1/models")
        assert code == 200
    w = restarted(r, "server")
    cause = w["server"]["last_cause"]
    expect = {"exit0": "gone", "engine_gone": "engine processes are gone", "wedged": "wedged"}[how]
    assert expect in cause, cause
    if how == "wedged":
        assert not EngineProcess.from_dict(stopped).alive()  # the stopped process was killed too
    r.finished()


def server_get(port: int, path: str) -> tuple[int, str]:
    from remote.host.processes.server_process import get_url

    return get_url(f"http://127.0.0.1:{port}{path}", timeout=3)


def test_a_start_up_helper_that_ends_is_not_a_lost_engine(rig):
    # vLLM's start-up runs a child for a few seconds (model inspection) that ends before it is ready:
    # found by the real-engine tier, where the watcher once killed a loading server for it
    r = rig(server_args=["--fake-helper", "5.6", "--fake-delay", "6.5"], n=8)
    r.start()
    r.finished()
    assert r.watch()["server"]["restarts"] == 0 and not (r.root / "run" / "recover.jsonl").exists()


def test_a_busy_healthy_server_is_never_killed(rig):
    # answers take 3 s (longer than wedged_after 2 s) but tokens keep flowing: not a wedge
    r = rig(answer_delay=3.0, n=8)
    r.start()
    r.finished(timeout=90)
    assert r.watch()["server"]["restarts"] == 0


def test_a_server_that_dies_at_every_start_ends_in_a_clean_give_up(rig, tmp_path):
    r = rig(server_args=["--fake-die-later", str(tmp_path / "once")])
    r.start()
    r.wait_records(4)
    old = r.pid("server.pid")
    os.kill(old["pid"], signal.SIGKILL)
    w = wait_for(
        lambda: r.watch().get("server", {}).get("state") == "fatal" and r.watch(),
        30,
        what="give-up",
    )
    assert w["server"]["restarts"] == 0 and w["server"]["attempt"] == 3
    assert any("illegal memory access" in line for line in w["server"]["log"])
    st = wait_for(lambda: r.status()["state"] == "failed" and r.status(), 30, what="job failed")
    assert "gave up" in st["message"] and "illegal memory access" in st["message"]
    wait_for(
        lambda: not ProcessRecord.live(r.root / "run" / "watcher.pid"), 10, what="watcher gone"
    )
    assert not ProcessRecord.live(r.root / "run" / "runner.pid")  # nothing started again
    assert not server_processes(old) and not ProcessRecord.live(r.root / "run" / "server.pid")
    lines = r.event_lines()
    assert any(e.startswith("failed ") and "illegal memory access" in e for e in lines), lines
    events = [json.loads(x) for x in (r.root / "run" / "recover.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events].count("died") == 4 and events[-1]["event"] == "gave_up"
    # the first death restarted at once, then the backoff, doubled: 0, 0.2, 0.4 s as the watcher
    # decided them (its log), and never sooner (the deaths' own times)
    delays = re.findall(r"server: .*; restart \d of 3 in ([\d.]+)s", watcher_log(r))
    assert [float(x) for x in delays] == [0.0, 0.2, 0.4], delays
    deaths = [e["at"] for e in events if e["event"] == "died"]
    assert deaths[2] - deaths[1] >= 0.2 and deaths[3] - deaths[2] >= 0.4
    page = tmp_path / "report.html"
    res = cli(r.cfg, "report", "--host", "gpu", "--out", str(page))
    assert res.returncode == 0, res.stdout + res.stderr
    html = page.read_text()
    assert (
        "Recoveries by the host" in html and "gave up" in html and "illegal memory access" in html
    )
    out = cli(r.cfg, "status", "--host", "gpu").stdout
    assert "GAVE UP on the server" in out and "failed" in out, out


def test_runner_killed_9_is_restarted_and_a_finished_job_is_not(rig):
    r = rig()
    r.start()
    r.wait_records(8)
    old = r.pid("runner.pid")
    os.kill(old["pid"], signal.SIGKILL)
    w = restarted(r, "runner")
    assert "died without being stopped" in w["runner"]["last_cause"]
    assert r.pid("runner.pid")["pid"] != old["pid"]
    r.finished()
    lines = r.event_lines()
    assert any(e.startswith("runner_restarted ") for e in lines), lines
    # a finished job stays finished: the watcher's verdict on it, once made, is final (a runner
    # no longer wanted is not looked at again)
    w = wait_for(
        lambda: (r.watch().get("runner") or {}).get("state") == "idle" and r.watch(),
        what="the watcher's verdict on the finished runner",
    )
    assert w["runner"]["restarts"] == 1
    assert "runner: finished by itself" in watcher_log(r) and "not restarted" in watcher_log(r)
    assert not intent.read(Paths(r.root)).part("runner").wanted
    assert ProcessRecord.live(r.root / "run" / "watcher.pid")  # the server is still watched
    server.stop(r.conn, grace=0)
    wait_for(
        lambda: not ProcessRecord.live(r.root / "run" / "watcher.pid"), 10, what="watcher exits"
    )


def test_a_stop_says_it_stopped_the_runner_the_watcher_started_after_someone_elses_signal(rig):
    r = rig()
    r.start()
    r.wait_records(4)
    old = r.pid("runner.pid")["pid"]
    os.kill(old, signal.SIGTERM)  # someone's, a preemption's: not deploytool's
    restarted(r, "runner")
    new = r.pid("runner.pid")["pid"]
    out = control.stop(r.conn, grace=0)
    assert out.stopped == [new]
    assert out.found == (
        f"the watcher had started it again after: the runner (pid {old}) stopped by SIGTERM, "
        "not by deploytool (someone's kill, a shutdown)"
    )
    again = control.stop(r.conn, grace=0)
    assert not again.was_running and again.found.startswith(f"the last one, pid {new}: ")


def test_a_runner_killed_after_a_deploy_comes_back_from_the_release_it_ran(rig):
    """A hosts.yaml edited and deployed changes nothing until a restart is typed: its sampling
    is one the records refuse, and a runner brought back from it would fail to start, the job dead
    at its first crash."""
    import yaml

    r = rig()
    r.start()
    r.wait_records(4)
    old = r.pid("runner.pid")
    data = yaml.safe_load(r.cfg.path.read_text())
    data["job"]["sampling"]["temperature"] = 0.7
    r.cfg.path.write_text(yaml.safe_dump(data, sort_keys=False))
    deploy_host(r.conn, load_config(r.cfg.path))
    assert (r.root / "current").resolve() != Path(old["release"]).resolve()
    os.kill(old["pid"], signal.SIGKILL)
    restarted(r, "runner")
    assert r.pid("runner.pid")["release"] == old["release"]
    r.finished()  # every prompt once: the runner brought back did start


def test_a_runners_first_death_is_restarted_at_once_its_third_after_a_backoff(rig):
    # the rule's arithmetic is Budget's (unit-tested with a fake clock); here: the watcher applies
    # it to a runner killed three times, and no new runner starts before its decided time
    r = rig(recover=dict(FAST, max_restarts=5), n=40)  # 10 made by the third kill, at most 16/s
    r.start()
    gaps = []
    for k in range(3):
        r.wait_records(2 + 4 * k)
        old = r.pid("runner.pid")
        os.kill(old["pid"], signal.SIGKILL)
        new = wait_for(
            lambda o=old: (n := r.pid("runner.pid"))["pid"] != o["pid"] and n, 60, what="restart"
        )
        died = [
            json.loads(line)
            for line in (r.root / "run" / "recover.jsonl").read_text().splitlines()
            if '"died"' in line and '"runner"' in line
        ][-1]
        gaps.append(new["started_at"] - died["at"])  # the death seen -> the new runner's start
    lines = re.findall(r"runner: .*; restart \d of 5 in ([\d.]+)s", watcher_log(r))
    assert [float(x) for x in lines] == [0.0, 0.2, 0.4], lines  # at once, then doubling
    assert gaps[1] >= 0.2 and gaps[2] >= 0.4, gaps
    r.finished(timeout=120)


def test_stop_and_server_stop_are_obeyed(rig):
    r = rig(answer_delay=0.5)
    r.start()
    r.wait_records(2)
    control.stop(r.conn, grace=0)
    server.stop(r.conn, grace=0)
    # the watcher ends with what it watched: once it is gone nothing can come back
    wait_for(
        lambda: not ProcessRecord.live(r.root / "run" / "watcher.pid"), what="the watcher exits"
    )
    assert not ProcessRecord.live(r.root / "run" / "runner.pid")
    assert not ProcessRecord.live(r.root / "run" / "server.pid")
    assert not ProcessRecord.live(r.root / "run" / "watcher.pid")
    w = r.watch()
    assert w["server"]["restarts"] == 0 and w["runner"]["restarts"] == 0


def test_a_watcher_killed_9_comes_back_and_then_heals_a_server_death(rig):
    r = rig(answer_delay=0.4, n=120)  # a job that outlasts the test's steps on a busy machine
    r.start()
    r.wait_records(2)
    watcher = r.pid("watcher.pid")
    os.kill(watcher["pid"], signal.SIGKILL)
    wait_for(lambda: not ProcessRecord.from_dict(watcher).alive(), 5, what="watcher dead")
    back = wait_for(
        lambda: (
            (b := r.pid("watcher.pid"))["pid"] != watcher["pid"]
            and ProcessRecord.from_dict(b).alive()
            and b
        ),
        15,
        what="the runner starts the watcher again",
    )
    wait_for(lambda: control.job_status(r.conn).supervision.supervised, 10, what="supervised")
    wait_for(lambda: r.status()["watcher_restarts"] == 1, 10, what="status counts it")
    wait_for(
        lambda: any(e.startswith("watcher_restarted ") for e in r.event_lines()), 10, what="told"
    )
    # never two: the runner's guard looks again every 2 s of its clock and finds this one
    runner_time_passes(r.root, 5)
    assert r.pid("watcher.pid")["pid"] == back["pid"] and r.status()["watcher_restarts"] == 1
    os.kill(r.pid("server.pid")["pid"], signal.SIGKILL)  # and the watcher it started heals this
    restarted(r, "server")
    r.finished()


@pytest.mark.slow
def test_killing_the_watcher_and_the_runner_at_once_is_left_to_restart(rig):
    r = rig(answer_delay=0.4, n=120)
    r.start()
    r.wait_records(2)
    watcher, runner = r.pid("watcher.pid"), r.pid("runner.pid")
    os.kill(runner["pid"], signal.SIGKILL)
    os.kill(watcher["pid"], signal.SIGKILL)
    wait_for(lambda: not ProcessRecord.from_dict(watcher).alive(), 5, what="watcher dead")
    out = cli(r.cfg, "status", "--host", "gpu")
    assert out.returncode == 0 and "unsupervised" in out.stdout, out.stdout
    assert "nor the runner" in out.stdout and "restart` brings it back" in out.stdout
    st = control.job_status(r.conn)
    assert st.supervision.enabled and not st.supervision.supervised
    again = cli(r.cfg, "restart", "--host", "gpu")
    assert again.returncode == 0, again.stdout + again.stderr
    back = r.pid("watcher.pid")
    assert back["pid"] != watcher["pid"] and ProcessRecord.from_dict(back).alive()
    assert control.job_status(r.conn).supervision.supervised
    r.finished()


def test_recover_false_starts_no_watcher(rig):
    r = rig(recover=False)
    assert r.recover == RecoverSpec(enabled=False)
    r.start()
    assert not (r.root / "run" / "watcher.pid").exists()
    r.finished()


def test_a_restart_with_recover_false_ends_the_watcher(rig):
    r = rig(answer_delay=0.4)
    r.start()
    watcher = r.pid("watcher.pid")
    flags = control.parse_run_flags(r.cfg)
    control.restart(r.conn, flags, recover=RecoverSpec(enabled=False))  # a live re-cap
    wait_for(lambda: not ProcessRecord.from_dict(watcher).alive(), 10, what="the watcher to exit")
    r.finished()  # the job itself went on to its end: the re-cap stopped nothing
