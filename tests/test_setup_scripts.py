"""The set-up scripts a newcomer runs: they never delete or change what they did not make."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import REPO

SETUP_VLLM = REPO / "scripts" / "setup-vllm.sh"


def setup_vllm(venv: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(venv.parent), "DEPLOYTOOL_VLLM_VENV": str(venv)}
    return subprocess.run(
        ["bash", str(SETUP_VLLM)], env=env, capture_output=True, text=True, timeout=60
    )


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_folder_that_is_not_a_vllm_venv_is_refused_and_left_as_it_was(tmp_path):
    venv = tmp_path / "my-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "notes.txt").write_text("mine")
    before = tree(venv)
    res = setup_vllm(venv)
    assert res.returncode == 2
    assert "is not a venv that imports vllm" in res.stderr and "DEPLOYTOOL_VLLM_VENV" in res.stderr
    assert tree(venv) == before


def test_a_users_venv_that_imports_vllm_is_used_as_it_is(tmp_path):
    venv = tmp_path / "vllm-venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    # stands in for a working vLLM venv: every import the rig asks for succeeds
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    (venv / "lib-of-3.4-GB").write_text("kept")
    before = tree(venv)
    res = setup_vllm(venv)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == str(python)
    assert "as it is (not made by deploytool" in res.stderr
    assert tree(venv) == before  # nothing removed, nothing added
