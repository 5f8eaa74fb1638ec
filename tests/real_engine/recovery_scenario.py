"""Three failures of a real job, one after another, each healed by the host's watcher with nobody at
the keyboard: the runner killed -9, the API server killed -9 (its EngineCore lives on, re-parented),
the EngineCore SIGSTOPped (a wedge: HTTP still answers). Shared by the real-engine test (which checks
every prompt is recorded once) and bench/bench_recovery.py (which prints how long each one cost).

Cost of a failure: from the moment it is made to the first token any stream of the runner gets
afterwards (status.json's endpoint `last_token_at`), i.e. the seconds the engine did no job work.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from remote.common import procinfo

FAILURES = ("runner_killed", "server_killed", "engine_stopped")


@dataclass
class Failure:
    what: str
    at: float  # when it was made
    noticed_s: float | None = None  # until the watcher recorded the death (recover.jsonl)
    restarted_s: float | None = None  # until the watcher said it was back
    first_token_s: float | None = None  # until the next token reached the runner
    leftovers_alive_s: float | None = None  # server deaths: how long the old session outlived it
    notes: list[str] = field(default_factory=list)


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _events(host: Path) -> list[dict]:
    try:
        return [json.loads(x) for x in (host / "run" / "recover.jsonl").read_text().splitlines()]
    except OSError:
        return []


def _last_token(host: Path) -> float:
    eps = _json(host / "run" / "status.json").get("endpoints") or []
    return max([e.get("last_token_at") or 0.0 for e in eps] or [0.0])


def _wait(pred, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def engine_cores(sid: int) -> list[int]:
    return [
        p for p in procinfo.session_members(sid) if procinfo.cmdline(p)[:1] == ["VLLM::EngineCore"]
    ]


def _measure(host: Path, f: Failure, kind: str, n_events: int, timeout: float, old: dict | None):
    """Wait for the watcher's death record, its restart, and the next token; fill in `f`."""
    _wait(lambda: len(_events(host)) > n_events, 60, f"the watcher to notice {f.what}")
    f.noticed_s = _events(host)[n_events]["at"] - f.at
    restarted = _wait(
        lambda: next(
            (
                e
                for e in _events(host)[n_events:]
                if e["event"] == "restarted" and e["what"] == kind
            ),
            None,
        ),
        timeout,
        f"{kind} restarted after {f.what}",
        interval=0.2,
    )
    f.restarted_s = restarted["at"] - f.at
    if old is not None:
        sid, start = old.get("sid", old["pid"]), old["start_time"]
        gone = _wait(
            lambda: not procinfo.session_members(sid, since=start) and time.time(),
            60,
            "old session gone",
        )
        f.leftovers_alive_s = gone - f.at
    t = _wait(
        lambda: _last_token(host) > f.at and _last_token(host), 120, f"a token after {f.what}"
    )
    f.first_token_s = t - f.at


def run(host: Path, wedge_after: float, load_timeout: float = 400) -> list[Failure]:
    """The three failures, each once the job has made progress after the one before."""
    out = []
    for what in FAILURES:
        done = _json(host / "run" / "status.json").get("completion_tokens", 0)
        _wait(
            lambda done=done: (
                _json(host / "run" / "status.json").get("completion_tokens", 0) > done + 500
            ),
            300,
            f"progress before {what}",
            interval=0.2,
        )
        n = len(_events(host))
        server = _json(host / "run" / "server.pid")
        f = Failure(what, time.time())
        if what == "runner_killed":
            os.kill(_json(host / "run" / "runner.pid")["pid"], signal.SIGKILL)
            _measure(host, f, "runner", n, 120, None)
        elif what == "server_killed":
            cores = engine_cores(server["sid"])
            os.kill(server["pid"], signal.SIGKILL)
            time.sleep(0.5)
            alive = [p for p in cores if procinfo.alive(p)]
            f.notes.append(f"EngineCore alive 0.5 s after the API server's kill -9: {bool(alive)}")
            _measure(host, f, "server", n, load_timeout, server)
        else:
            cores = engine_cores(server["sid"])
            assert cores, "no EngineCore in the server's session"
            os.kill(cores[0], signal.SIGSTOP)
            f.notes.append(_http_while_stopped(server["port"]))
            _measure(host, f, "server", n, wedge_after + load_timeout, server)
        out.append(f)
    return out


def _http_while_stopped(port: int) -> str:
    """What a wedged real vLLM still answers (the reason the wedge rule exists)."""
    from remote.host.server import get_url

    time.sleep(1.0)
    m, _ = get_url(f"http://127.0.0.1:{port}/v1/models", timeout=5)
    h, _ = get_url(f"http://127.0.0.1:{port}/health", timeout=5)
    met, _ = get_url(f"http://127.0.0.1:{port}/metrics", timeout=5)
    return f"EngineCore stopped: /v1/models {m}, /health {h}, /metrics {met}"
