"""How many commands each user command sends to the host over SSH (a real sshd on 127.0.0.1): one
row per command as typed, with the host commands it ran (each `python -m remote --request` named by
its request; a kept look is one command however many looks it answers).

    .venv/bin/python bench/bench_host_commands.py [--load-s 40]

The job: two datasets on the stand-in vLLM (tests/fake_vllm.py, started by deploytool as the job's
server), answers slow enough that caps change live. `restart --stage draft` is measured twice: its
server's load held --load-s seconds, then not held at all; the count must not grow with the load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import REPO, Rig  # noqa: E402

COUNTED = os.environ.get("BENCH_COUNT_TO")


def _count_in_this_process(out: str) -> None:
    """Every host command of this laptop process, appended to `out` (one JSON line each)."""
    from deploytool.connectors import local, ssh  # noqa: F401 (the connectors, to be counted)
    from deploytool.connectors.base import Connector

    def record(kind, argv, stdin=None):
        what = " ".join(map(str, argv[-3:]))
        if stdin:
            try:
                what = " ".join(json.loads(stdin)["command"])
            except (ValueError, KeyError, TypeError):
                pass
        with open(out, "a") as f:
            f.write(json.dumps({"kind": kind, "what": what}) + "\n")

    for cls in Connector.__subclasses__():
        run, start, size, read_range = cls.run, cls.start, cls.size, cls.read_range

        def counted_run(self, argv, *a, _run=run, **kw):
            record("run", argv, kw.get("stdin"))
            return _run(self, argv, *a, **kw)

        def counted_start(self, argv, *a, _start=start, **kw):
            record("start (kept)", argv)
            return _start(self, argv, *a, **kw)

        def counted_size(self, path, _size=size):
            record("size", [path])
            return _size(self, path)

        def counted_read(self, path, *a, _read=read_range, **kw):
            record("read", [path])
            return _read(self, path, *a, **kw)

        cls.run, cls.start, cls.size, cls.read_range = (
            counted_run,
            counted_start,
            counted_size,
            counted_read,
        )


def typed(cfg: Path, line: str, out: Path) -> list[dict]:
    """`deploytool --config CFG LINE` as a user runs it, counted; its host commands."""
    out.unlink(missing_ok=True)
    env = dict(os.environ, BENCH_COUNT_TO=str(out))
    args = [sys.executable, __file__, "--config", str(cfg), *line.split()]
    r = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
    if r.returncode != 0:
        raise SystemExit(f"`{line}` failed:\n{r.stdout}\n{r.stderr}")
    return [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--load-s", type=float, default=40.0)
    a = p.parse_args()
    sys.path.insert(0, str(REPO))
    import yaml

    from tests.helpers.draft_job import draft_of, drafted_job

    rig = Rig()
    tmp = Path(tempfile.mkdtemp(prefix="deploytool-hostcmds-"))
    gate = tmp / "servers-may-load"
    gate.touch()
    cfg, root = drafted_job(
        tmp, draft_of(3), delay=0.5, server_args=["--fake-load-until", str(gate)]
    )
    data = yaml.safe_load(cfg.read_text())
    data["hosts"]["box"] = rig.host_entry(root)
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    out, rows = tmp / "counted.jsonl", []

    def measure(line: str, label: str | None = None) -> None:
        t0 = time.perf_counter()
        cmds = typed(cfg, line, out)
        rows.append((label or line, cmds, time.perf_counter() - t0))

    try:
        measure("deploy", "deploy (first)")
        measure("restart --max-samples 12", "a start (the server down: started first)")
        measure("status")
        measure("restart --cap B1=10", "restart --cap B1=10 (live)")
        measure("deploy", "deploy (nothing new)")
        measure("stop")
        measure("restart --max-samples 4")
        typed(cfg, "tail", out)
        gate.unlink()
        threading.Timer(a.load_s, gate.touch).start()
        measure("restart --stage draft", f"restart --stage draft (model load held {a.load_s:g}s)")
        typed(cfg, "tail", out)
        measure("restart --stage generate", "restart --stage generate (load not held)")
    finally:
        gate.touch()
        for line in ("stop", "server.stop"):
            try:
                typed(cfg, line, out)
            except SystemExit:
                pass
        rig.close()
    print(f"{'command as typed':58} {'host commands':>13}  {'wall s':>6}  which")
    for label, cmds, wall in rows:
        which = ", ".join(c["what"] if c["kind"] == "run" else c["kind"] for c in cmds)
        print(f"{label:58} {len(cmds):>13}  {wall:6.1f}  {which}")


if __name__ == "__main__":
    if COUNTED:
        sys.path.insert(0, str(REPO))
        _count_in_this_process(COUNTED)
        import runpy

        sys.argv = ["deploytool", *sys.argv[1:]]
        runpy.run_module("deploytool", run_name="__main__", alter_sys=True)
    else:
        main()
