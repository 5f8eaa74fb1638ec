"""Several hosts in one command never freeze or half-change each other: `tail` over a host that
does not answer goes on with the others; `restart` asks every host before it changes any."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path

from tests.conftest import status, wait_for, write_config, write_prompts
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
