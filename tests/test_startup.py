"""Start-up: what a command imports. paramiko and fabric only when an SSH host is used; rich only when
something is drawn."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO, write_config, write_prompts

HEAVY = ("paramiko", "fabric", "rich", "tarfile")


def imported_after(code: str, cwd) -> set[str]:
    probe = (
        f"import sys\n{code}\nimport json\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})))"
    )
    res = subprocess.run(
        [sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return set(json.loads(res.stdout.strip().splitlines()[-1]))


def test_importing_the_tasks_loads_no_ssh_and_no_terminal_ui():
    assert imported_after("import deploytool.collection, deploytool.program", REPO) == set()


def test_a_command_on_the_local_host_never_imports_paramiko(tmp_path):
    write_prompts(tmp_path / "data" / "prompts" / "B1.jsonl", 2)
    cfg = write_config(tmp_path, {"local": {"connect": "local", "remote_dir": ".host"}})
    run = (
        f"sys.argv = ['deploytool', '--config', {str(cfg.path)!r}, 'status']\n"
        "from deploytool.program import program\n"
        "try:\n    program.run()\nexcept SystemExit:\n    pass"
    )
    subprocess.run(
        [sys.executable, "-m", "deploytool", "--config", str(cfg.path), "deploy"],
        check=True,
        capture_output=True,
    )
    loaded = imported_after(run, tmp_path)
    assert "paramiko" not in loaded and "fabric" not in loaded
    assert "rich" in loaded  # the status screen was drawn: the probe saw the command really run
