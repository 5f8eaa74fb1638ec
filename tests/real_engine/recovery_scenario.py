"""Three failures of a real job, one after another, each healed by the host's watcher with nobody at
the keyboard: the runner killed -9, the API server killed -9 (its EngineCore lives on, re-parented),
the EngineCore SIGSTOPped (a wedge: HTTP still answers). Shared by the real-engine test (which checks
every prompt is recorded once) and bench/bench_recovery.py (which prints how long each one cost).

Cost of a failure: from the moment it is made to the first token any stream of the runner gets after
the watcher has brought the process back (status.json's endpoint `last_token_at`): the seconds the
engine did no work for the job (a wedge's requests stop streaming when the engine stops).
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from remote.common import procinfo
from tests.conftest import wait_for

FAILURES = ("runner_killed", "server_killed", "engine_stopped")


@dataclass
class Failure:
    what: str
    at: float  # when it was made
    noticed_s: float | None = None  # until the watcher recorded the death (recover.jsonl)
    restarted_s: float | None = None  # until the watcher said it was back
    first_token_s: float | None = None  # until a token reached the runner after the restart
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
    return wait_for(pred, timeout, interval, what)


def engine_cores(sid: int) -> list[int]:
    return [
        p for p in procinfo.session_members(sid) if procinfo.cmdline(p)[:1] == ["VLLM::EngineCore"]
    ]


def _measure(host: Path, f: Failure, kind: str, n_events: int, timeout: float, old: dict | None):
    """Poll (every 0.1 s) for the watcher's death record, the old server's session gone, the
    watcher's restart and then the first token any stream got after it; fill in `f`."""
    session = (old.get("sid", old["pid"]), old["start_time"]) if old else None
    back = None

    def step():
        nonlocal back
        now = time.time()
        events = _events(host)[n_events:]
        if f.noticed_s is None and events:
            f.noticed_s = events[0]["at"] - f.at
        if session and f.leftovers_alive_s is None:
            if not procinfo.session_members(session[0], since=session[1]):
                f.leftovers_alive_s = now - f.at
        if back is None:
            done = [e for e in events if e["event"] == "restarted" and e["what"] == kind]
            back = done[0]["at"] if done else None
            f.restarted_s = back - f.at if back else None
        if back is not None and _last_token(host) > back:
            f.first_token_s = _last_token(host) - f.at
        return f.first_token_s is not None and (session is None or f.leftovers_alive_s is not None)

    wait_for(step, timeout, 0.1, f"{kind} back after {f.what}, and a token from it")


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
    from remote.host.processes.server_process import get_url

    time.sleep(1.0)
    m, _ = get_url(f"http://127.0.0.1:{port}/v1/models", timeout=5)
    h, _ = get_url(f"http://127.0.0.1:{port}/health", timeout=5)
    met, _ = get_url(f"http://127.0.0.1:{port}/metrics", timeout=5)
    return f"EngineCore stopped: /v1/models {m}, /health {h}, /metrics {met}"
