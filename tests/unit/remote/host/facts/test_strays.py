"""Finding runners without a pid file: a runner's command line *and* a working directory or --root in
this remote_dir, never the name alone."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from remote.common import procinfo
from remote.common.jobspec import Paths
from remote.host.facts.strays import _looks_like_runner, _root_arg, stray_runners


def test_what_a_runner_s_command_line_looks_like():
    assert _looks_like_runner(["/v/bin/python3", "-m", "remote", "run", "--max-samples", "5"])
    assert _looks_like_runner(["python", "-m", "remote.run_inference"])
    assert _looks_like_runner(["python3", "remote/run_inference.py"])
    assert not _looks_like_runner(["vim", "-m", "remote", "run"])  # not python
    assert not _looks_like_runner(["python", "tail.py", "logs/run_inference.py.log"])
    assert not _looks_like_runner([])


def test_the_root_a_runner_was_given():
    assert _root_arg(["python", "--root", "/r"], "/x") == Path("/r")
    assert _root_arg(["python", "--root", "rel"], "/x") == Path("/x/rel")
    assert _root_arg(["python", "--root=/r2"], None) == Path("/r2")
    assert _root_arg(["python"], "/x") is None


def test_a_runner_started_by_hand_here_is_found_one_elsewhere_is_not(tmp_path):
    here, elsewhere = tmp_path / "eagle3", tmp_path / "other"
    here.mkdir()
    elsewhere.mkdir()
    code = "import time; time.sleep(60)"
    # python -c ... -m remote run: a runner's command line, without being one
    argv = [sys.executable, "-c", code, "-m", "remote", "run"]
    mine = subprocess.Popen(argv, cwd=here)
    by_root = subprocess.Popen(argv + ["--root", str(here)], cwd=elsewhere)
    theirs = subprocess.Popen(argv, cwd=elsewhere)
    try:
        for p in (mine, by_root, theirs):
            while "-c" not in procinfo.cmdline(p.pid):
                time.sleep(0.01)
        found = stray_runners(Paths(here), exclude=set())
        assert mine.pid in found and by_root.pid in found and theirs.pid not in found
        assert mine.pid not in stray_runners(Paths(here), exclude={mine.pid})
    finally:
        for p in (mine, by_root, theirs):
            p.kill()
            p.wait()
