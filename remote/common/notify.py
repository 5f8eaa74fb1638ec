"""job.notify: tell someone when the job needs a look. The command runs with `sh -c` on the host, in a
session of its own and without the job's token (stopping the job never kills it, and it never holds the
job up), under `timeout`, with DEPLOYTOOL_EVENT, DEPLOYTOOL_MESSAGE and DEPLOYTOOL_REMOTE_DIR set. A
command that fails or hangs is logged; the job goes on. One event at a time, in the order they
happened: `engine_down` is never told after the `failed` it led to."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Callable

from .jobspec import JOB_TOKEN_ENV, NOTIFY_DEFAULT, NOTIFY_TIMEOUT_S


class Notifier:
    def __init__(self, cfg: dict | None, remote_dir: Path, log: Callable[[str], None]):
        cfg = cfg or {}
        self.command: str | None = cfg.get("command")
        self.on = set(cfg.get("on") or NOTIFY_DEFAULT)
        self.timeout = float(cfg.get("timeout", NOTIFY_TIMEOUT_S))
        self.remote_dir = remote_dir
        self.log = log
        self.sent: list[str] = []  # events sent in this run, in order
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._sender: threading.Thread | None = None
        self._pending = 0  # events queued or being sent
        self._done = threading.Condition()

    def send(self, event: str, message: str) -> None:
        if not self.command or event not in self.on:
            return
        self.sent.append(event)
        env = {k: v for k, v in os.environ.items() if k != JOB_TOKEN_ENV}
        env.update(
            DEPLOYTOOL_EVENT=event,
            DEPLOYTOOL_MESSAGE=message,
            DEPLOYTOOL_REMOTE_DIR=str(self.remote_dir),
        )
        argv = ["sh", "-c", self.command]
        # coreutils: it ends the command even if the runner is gone by then
        if killer := shutil.which("timeout"):
            argv = [killer, "-k", "5", f"{self.timeout:g}", *argv]
        with self._done:
            self._pending += 1
        self._queue.put((event, argv, env))
        if self._sender is None:
            self._sender = threading.Thread(target=self._send_in_order, daemon=True)
            self._sender.start()

    def _send_in_order(self) -> None:
        while True:
            event, argv, env = self._queue.get()
            try:
                self._run(event, argv, env)
            except Exception as e:  # one event's surprise must not silence the ones after it
                self.log(f"notify {event}: {type(e).__name__}: {e}")
            finally:
                with self._done:
                    self._pending -= 1
                    self._done.notify_all()

    def _run(self, event: str, argv: list[str], env: dict) -> None:
        try:
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=self.remote_dir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as e:
            self.log(f"notify {event}: could not run the command: {e}")
            return
        try:
            out, _ = proc.communicate(timeout=self.timeout + 10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, 9)
            self.log(f"notify {event}: the command did not end within {self.timeout:g}s: killed")
            return
        if proc.returncode == 0:
            self.log(f"notify {event}: sent")
        else:
            last = (out or b"").decode(errors="replace").strip().splitlines()[-1:] or [""]
            why = "timed out" if proc.returncode == 124 else f"exit {proc.returncode}"
            self.log(f"notify {event}: the command failed ({why}) {last[0][:200]}".rstrip())

    def wait(self, seconds: float) -> None:
        """At the end of the run: give the last notifications a moment to go out (they run on anyway)."""
        with self._done:
            self._done.wait_for(lambda: self._pending == 0, timeout=seconds)
