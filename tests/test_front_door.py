"""The front door, typed as a user types it: the venv's `invoke` as a subprocess, cwd the repository
root (whose tasks.py hands invoke the collection), on the built-in `local` host and on a host over the
real sshd. deploy, restart with a cap, tail to the end, a restart that raises the cap, status, stop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import record_ids, records, ssh_host_entry, write_prompts
from tests.helpers.as_typed import ok, piped, read_by_no_one, typed

DATASETS = ("B1", "B2")


def _config(tmp_path: Path, host: dict, engine: dict) -> Path:
    for ds in DATASETS:
        write_prompts(tmp_path / "data" / "prompts" / f"{ds}.jsonl", 12, ds)
    data = {
        "default_host": "gpu",
        "hosts": {"gpu": host},
        "job": {
            "datasets": {
                ds: {"prompts": f"data/prompts/{ds}.jsonl", "est_tokens": 100} for ds in DATASETS
            },
            "engine": engine,
            "sampling": {"max_tokens": 256, "temperature": 1.0},
        },
        "recover": False,
    }
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(params=["local", "ssh"])
def front_door(request, tmp_path):
    """(hosts.yaml, the host's remote_dir) for a `local` host and for one over the test sshd."""
    root = tmp_path / "host"
    if request.param == "local":
        host = {"connect": "local", "remote_dir": str(root)}
        engine = {"kind": "simulate", "concurrency": 4, "tokens_per_s": 200_000}
    else:
        rig = request.getfixturevalue("ssh_rig")
        srv = request.getfixturevalue("openai_server")(tokens=40)
        host = ssh_host_entry(rig, root)
        engine = {"kind": "openai", "base_url": srv.url, "model": "test-model", "concurrency": 4}
    config = _config(tmp_path, host, engine)
    yield config, root
    typed("invoke stop --grace 0", config)


def test_invoke_lists_the_tasks_from_the_repository_root(tmp_path):
    out = ok("invoke --list", tmp_path / "unused.yaml")
    for name in ("deploy", "restart", "tail", "status", "stop", "export", "server.start"):
        assert f"  {name} " in out, out


@pytest.mark.slow
def test_the_design_card_as_typed(front_door):
    config, root = front_door
    assert "deployed release" in ok("invoke deploy", config)

    out = ok("invoke restart --max-samples 5", config)
    assert "started runner" in out
    assert "finished" in ok("invoke tail", config).splitlines()[-1]
    first = {ds: records(root, ds) for ds in DATASETS}
    assert {ds: len(r) for ds, r in first.items()} == {"B1": 5, "B2": 5}

    ok("invoke restart --max-samples 9", config)
    assert "finished" in ok("invoke tail", config).splitlines()[-1]
    for ds in DATASETS:
        ids = record_ids(root, ds)
        assert len(ids) == len(set(ids)) == 9, ids  # exactly once
        assert sorted(ids) == [f"{ds}-{i:06d}" for i in range(9)]  # the first nine of the file
        assert records(root, ds)[:5] == first[ds]  # the first five kept as they were, not redone

    status = ok("invoke status", config)
    assert "finished" in status and "9" in status
    ok("invoke stop", config)
    state = json.loads((root / "run" / "status.json").read_text())
    assert state["datasets"]["B1"]["done"] == 9


def test_a_mistyped_task_or_flag_is_bad_input_with_a_suggestion(tmp_path):
    res = typed("invoke restart --max-sample 40", tmp_path / "unused.yaml")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: restart has no flag --max-sample (did you mean --max-samples?); "
        "`invoke restart --help` lists them"
    ]
    res = typed("invoke statuss", tmp_path / "unused.yaml")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: no task named 'statuss' (did you mean 'status'?); `invoke --list` lists them"
    ]
    res = typed("invoke stop --grace", tmp_path / "unused.yaml")  # a number flag with no number
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: stop --grace: needs a value; `invoke stop --help` says what it takes"
    ]


# the venv's invoke, with a Ctrl-C landing at a chosen moment outside any task: while the tasks load
# (an import of the package), or in invoke's own step after they have loaded
CTRL_C_AT = """
import importlib.abc, sys
from invoke import main, program

class CtrlC(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "deploytool.collection":
            raise KeyboardInterrupt

def ctrl_c(self, *args, **kwargs):
    raise KeyboardInterrupt

if sys.argv[1] == "load":
    sys.meta_path.insert(0, CtrlC())
else:
    program.Program.parse_cleanup = ctrl_c
sys.argv = ["invoke", "--list"]
main.program.run()
"""


def test_a_ctrl_c_while_invoke_starts_is_said_in_one_line_exit_130():
    """Ctrl-C before the task began (invoke exited 1 and said nothing, about one try in three at
    a third of a second): one line, exit 130, as outside any task."""
    import subprocess
    import sys

    from tests.conftest import REPO, piped_env

    for at, words in (
        ("load", "interrupted (Ctrl-C) before the command began: nothing was done"),
        ("parse", "interrupted (Ctrl-C) while invoke started or ended, around the command: "),
    ):
        res = subprocess.run(
            [sys.executable, "-c", CTRL_C_AT, at],
            cwd=REPO,
            env=piped_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 130 and len(lines) == 1, (at, res.returncode, res.stderr)
        assert lines[0].startswith(words), (at, lines)


def test_a_closed_stdout_ends_the_command_quietly_with_exit_0(tmp_path):
    """`invoke status | head -1`: the reader has what it wanted and closed the pipe; the command
    ends there, exit 0, with nothing on stderr (it exited 1, with a BrokenPipeError traceback
    where a line was printed plainly), whatever it was printing: a task's output, invoke's lists
    and help, through either program."""
    root = tmp_path / "host"
    config = _config(tmp_path, {"connect": "local", "remote_dir": str(root)}, {"kind": "simulate"})
    ok("invoke deploy", config)
    res = piped("invoke status", config)
    assert (res.returncode, res.stderr) == (0, ""), res
    assert res.stdout.startswith("gpu: never run"), res.stdout
    for line in (
        "invoke status",
        "invoke status --json",
        "invoke tail --once",
        "invoke --list",
        "invoke restart --help",
        "deploytool status",
        "deploytool --list",
    ):
        res = read_by_no_one(line, config)
        assert (res.returncode, res.stderr) == (0, ""), (line, res.returncode, res.stderr)
