"""Several hosts in one command never freeze or half-change each other: `tail` over a host that
does not answer goes on with the others; `restart` asks every host before it changes any."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path

import yaml

from tests.conftest import base_job, status, wait_for, write_config, write_prompts
from tests.helpers.as_typed import ok, started, typed
from tests.helpers.stand_ins import ServerProcess

# a host's Python that relays what it is asked to the real one, holding it while HANG exists:
# a host whose sshd answers and whose disk stalls (the look asked, never answered)
STALLING_PYTHON = """#!{python}
import os, subprocess, sys, time
args = sys.argv[1:]
if "--request" not in args:
    os.execv(sys.executable, [sys.executable, *args])
child = subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE)
while True:
    data = os.read(0, 1 << 16)
    while os.path.exists({hang!r}):
        time.sleep(0.05)
    if not data:
        break
    try:
        child.stdin.write(data)
        child.stdin.flush()
    except BrokenPipeError:
        break
try:
    child.stdin.close()
except BrokenPipeError:
    pass
sys.exit(child.wait())
"""


def stalling_python(tmp_path: Path, hang: Path) -> Path:
    exe = tmp_path / "bin" / "stalling-python"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(STALLING_PYTHON.format(python=sys.executable, hang=str(hang)))
    exe.chmod(0o755)
    return exe


class Lines:
    """A running command's output, read as it comes."""

    def __init__(self, proc):
        self.proc, self.lines = proc, []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def seen(self, pred, after: int = 0) -> int:
        """The index of the first line from `after` on that `pred` holds for, waited for."""

        def find():
            for i, line in enumerate(self.lines[after:], after):
                if pred(line):
                    return i + 1
            return None

        return wait_for(find, what=f"a line of tail's (so far: {self.lines[-4:]})") - 1


def test_tail_goes_on_with_the_others_while_one_host_does_not_answer(tmp_path):
    hang, holds = tmp_path / "hang", {h: tmp_path / f"hold-{h}" for h in ("a", "b")}
    for hold in holds.values():
        hold.touch()  # no answer made until the test says: each job's end is an event
    srvs = {h: ServerProcess(latency=0.01, hold_while=holds[h]).start() for h in holds}
    proj = tmp_path / "p"
    write_prompts(proj / "data" / "prompts" / "B1.jsonl", 4)

    def host(name: str, **extra) -> dict:
        engine = {"kind": "openai", "base_url": srvs[name].url, "model": "test-model"}
        engine |= {"request_timeout": 600, "concurrency": 4}
        entry = {"connect": "local", "remote_dir": str(tmp_path / name), "job": {"engine": engine}}
        return entry | extra

    b = host("b", python=str(stalling_python(tmp_path, hang)))
    cfg = write_config(proj, {"a": host("a"), "b": b}).path
    tail = None
    try:
        ok("invoke deploy --host a,b", cfg)
        ok("invoke restart --host a,b --max-samples 4", cfg)
        tail = started("invoke tail --host a,b", cfg)
        out = Lines(tail)
        seen = out.seen(lambda s: " b: running" in s)
        hang.touch()  # b's disk stalls: its next look is never answered
        down = out.seen(lambda s: " b: running" in s and "| unreachable since " in s, seen)
        assert re.search(
            r"unreachable since \d\d:\d\d:\d\d: its look has not answered in \d+s", out.lines[down]
        )
        holds["a"].unlink()  # a's job ends while b says nothing: tail shows it
        done = out.seen(lambda s: " a: finished | B1 4/4" in s, down)
        after_a = out.seen(lambda s: " b: " in s, done)
        assert "| unreachable since " in out.lines[after_a]  # b still said so, a's end shown
        assert tail.poll() is None  # b's job has not ended: tail goes on
        hang.unlink()  # b answers again
        back = out.seen(lambda s: " b: running" in s and "unreachable" not in s, after_a)
        holds["b"].unlink()
        assert tail.wait(timeout=120) == 0  # every job finished
        out.reader.join(timeout=30)
        assert any(" b: finished | B1 4/4" in s for s in out.lines[back:]), out.lines[-4:]
        assert status(tmp_path / "b")["state"] == "finished"
    finally:
        hang.unlink(missing_ok=True)
        for hold in holds.values():
            hold.unlink(missing_ok=True)
        if tail is not None and tail.poll() is None:
            tail.kill()
            tail.wait()
        typed("invoke stop --host a,b --grace 0", cfg)
        for s in srvs.values():
            s.stop()


def two_simulated_hosts(tmp_path: Path, datasets=("B1",), **b_extra) -> Path:
    proj = tmp_path / "p"
    for ds in datasets:
        write_prompts(proj / "data" / "prompts" / f"{ds}.jsonl", 4, ds)
    job = base_job(
        {ds: {"prompts": f"data/prompts/{ds}.jsonl", "est_tokens": 10} for ds in datasets}
    )
    job["engine"]["tokens_per_s"] = 1  # slow: the job still runs when the test looks
    hosts = {h: {"connect": "local", "remote_dir": str(tmp_path / h)} for h in ("a", "b")}
    hosts["b"] |= b_extra
    return write_config(proj, hosts, job=job).path


def test_a_restart_one_host_would_refuse_touches_no_host(tmp_path):
    cfg = two_simulated_hosts(tmp_path)
    ok("invoke deploy --host b", cfg)  # b's job has B1 only
    data = yaml.safe_load(cfg.read_text())
    write_prompts(cfg.parent / "data" / "prompts" / "B2.jsonl", 4, "B2")
    data["job"]["datasets"]["B2"] = {"prompts": "data/prompts/B2.jsonl", "est_tokens": 10}
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    ok("invoke deploy --host a", cfg)  # a's has B1 and B2
    try:
        res = typed("invoke restart --host a,b --cap B2=2", cfg)
        assert res.returncode != 0
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(
            "error: restart refused, no host touched (a, b): b would refuse: "
        ), res.stdout + res.stderr
        assert "B2" in lines[0] and "started runner" not in res.stdout
        assert not (tmp_path / "a" / "run" / "runner.pid").exists()  # a was not started
        assert not (tmp_path / "a" / "run" / "status.json").exists()
    finally:
        typed("invoke stop --host a,b --grace 0", cfg)


def test_a_restart_that_fails_on_one_host_while_acting_says_which_changed(tmp_path):
    import signal
    import subprocess

    # b's GPUs are held by a process that is not its server: only a real start looks
    hog = subprocess.Popen(["sleep", "600"], start_new_session=True)
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir(parents=True, exist_ok=True)
    smi.write_text(f"#!/bin/sh\necho '{hog.pid}, 40960'\n")
    smi.chmod(0o755)
    python = tmp_path / "bin" / "busy-gpu-python"
    python.write_text(f'#!/bin/sh\nDEPLOYTOOL_NVIDIA_SMI={smi} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    cfg = two_simulated_hosts(tmp_path, python=str(python))
    try:
        ok("invoke deploy --host a,b", cfg)
        res = typed("invoke restart --host a,b --max-samples 4", cfg)
        assert res.returncode == 1, res.stdout + res.stderr
        assert "a: started runner pid" in res.stdout and "b: FAILED: GPU memory" in res.stdout
        assert "restart: changed: a; failed: b (" in res.stdout, res.stdout
        assert "1 of 2 hosts failed: b" in res.stderr
        assert (tmp_path / "a" / "run" / "runner.pid").exists()
        assert not (tmp_path / "b" / "run" / "runner.pid").exists()
    finally:
        typed("invoke stop --host a,b --grace 0", cfg)
        hog.send_signal(signal.SIGKILL)
        hog.wait()
