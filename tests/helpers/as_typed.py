"""Commands typed as a user types them: the venv's `invoke` as a subprocess, cwd the repository root
(whose tasks.py hands invoke the collection)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, piped_env

INVOKE = str(Path(sys.executable).with_name("invoke"))
PROGRAMS = {"invoke": INVOKE, "deploytool": str(Path(sys.executable).with_name("deploytool"))}


def typed(
    line: str, config: Path, timeout: float = 120, cwd: Path = REPO
) -> subprocess.CompletedProcess:
    """One command line exactly as the README types it, from the repository root (or a folder
    inside it); the only thing the test adds is which hosts.yaml to read (never the developer's
    own)."""
    args = shlex.split(line)
    assert args[0] == "invoke"
    env = dict(piped_env(), DEPLOYTOOL_CONFIG=str(config))
    return subprocess.run(
        [INVOKE, *args[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def ok(line: str, config: Path, timeout: float = 120) -> str:
    res = typed(line, config, timeout)
    assert res.returncode == 0, f"`{line}` exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    assert "Traceback" not in res.stderr, res.stderr
    return res.stdout


def started(line: str, config: Path, cwd: Path = REPO) -> subprocess.Popen:
    """`typed`, left running (a `tail` that a test watches line by line): stdout piped, text."""
    args = shlex.split(line)
    assert args[0] == "invoke"
    env = dict(piped_env(), DEPLOYTOOL_CONFIG=str(config))
    return subprocess.Popen(
        [INVOKE, *args[1:]],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def piped(line: str, config: Path, reader: str = "head -1") -> subprocess.CompletedProcess:
    """`line | reader` as a shell runs it: stdout what the reader printed, stderr both's, and the
    exit status the command's own (`${PIPESTATUS[0]}`), not the reader's."""
    args = shlex.split(line)
    command = shlex.join([PROGRAMS[args[0]], *args[1:]])
    env = dict(piped_env(), DEPLOYTOOL_CONFIG=str(config))
    return subprocess.run(
        ["bash", "-c", f"{command} | {reader}; exit ${{PIPESTATUS[0]}}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def read_by_no_one(line: str, config: Path) -> subprocess.CompletedProcess:
    """`line`, its stdout a pipe whose reader has gone before it starts (a `| head -1` that has
    read its line): its first write meets the closed pipe, every time. stderr captured."""
    args = shlex.split(line)
    env = dict(piped_env(), DEPLOYTOOL_CONFIG=str(config))
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run(
            [PROGRAMS[args[0]], *args[1:]],
            cwd=REPO,
            env=env,
            stdout=w,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(w)
