"""Stand-ins for what a GPU host runs: the `vllm` command (tests/fake_vllm.py) and OpenAI test servers as processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.conftest import (
    REPO,
    free_port,
)


def fake_vllm(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(
        f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = 'vllm'\n"
        f"runpy.run_path({str(REPO / 'tests' / 'fake_vllm.py')!r}, run_name='__main__')\n"
    )
    exe.chmod(0o755)
    return exe


class ServerProcess:
    """tests/openai_server.py as its own process, so it can be killed like a real server."""

    def __init__(self, port: int | None = None, latency: float = 0.3, hold_while=None):
        self.port = port or free_port()
        self.latency = latency
        self.hold_while = hold_while  # a file: new requests wait while it exists
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "ServerProcess":
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.openai_server",
                "--port",
                str(self.port),
                "--latency",
                str(self.latency),
                *(["--hold-while", str(self.hold_while)] if self.hold_while else []),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout.readline().strip() == self.url
        return self

    def stats(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=5) as r:
            return json.loads(r.read())

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.kill()
