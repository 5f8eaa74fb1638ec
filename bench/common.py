"""Shared set-up for the benchmarks: a real sshd on 127.0.0.1 with generated keys (the test rig's)."""

from __future__ import annotations

import getpass
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.conftest import Sshd, keygen, ssh_host_entry, write_config  # noqa: E402

# the commands as on a user's machine: Python caches bytecode (some sandboxes set
# PYTHONDONTWRITEBYTECODE=1, and every run then compiles deploytool/ and remote/ from source)
USER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


class Rig:
    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="deploytool-bench-"))
        self.key = keygen(self.root / "id_client")
        auth = self.root / "authorized_keys"
        auth.write_text(Path(str(self.key) + ".pub").read_text())
        self.sshd = Sshd(self.root, auth).start()
        self.known_hosts = self.root / "known_hosts"
        self.known_hosts.write_text(self.sshd.known_hosts_line())
        self.user = getpass.getuser()

    def host_entry(self, remote_dir, **kw) -> dict:
        return ssh_host_entry(
            {"sshd": self.sshd, "client_key": self.key, "known_hosts": self.known_hosts},
            remote_dir,
            **kw,
        )

    def ssh_opts(self) -> list[str]:
        return [
            "-i",
            str(self.key),
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
        ]

    def close(self):
        self.sshd.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def deploytool(cfg: Path, *args: str, timeout: float = 600) -> str:
    """`deploytool --config CFG ARGS` as a user runs it; its output, or exit with what it said."""
    r = subprocess.run(
        [sys.executable, "-m", "deploytool", "--config", str(cfg), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    if r.returncode != 0:
        raise SystemExit(f"deploytool {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
    return r.stdout


def timed(fn, repeat: int = 5) -> tuple[float, list[float]]:
    """Median wall seconds of fn() over `repeat` runs (and all of them)."""
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), runs


__all__ = ["Rig", "timed", "write_config", "REPO", "USER_ENV"]
