"""The engine processes a server started, watched so that a dead one is named.

A vLLM launcher (`vllm serve`, or `--headless` for a data-parallel rank) starts its engine cores as
direct children in its own session. When a rank's engine dies the launcher may live on and the head
keeps serving, while every request it routes to that rank hangs: nothing on the HTTP side says so.
The children are recorded in the server's pid file once seen (by pid and start time: pids are
reused, and they rename themselves, so neither a name nor the environment finds them) and checked on
every `server status`.
"""

from __future__ import annotations

from ...common import machine, procinfo
from ...common.answers import LeftoverProcess
from ...common.jobspec import SERVER_TOKEN_ENV, Paths
from ...common.state import EngineProcess, ServerRecord
from . import kill

SETTLED_S = 5.0  # a child this old is part of the server, not a passing start-up helper


def children(rec: ServerRecord) -> list[EngineProcess]:
    """The launcher's direct children that stayed in its session and have lived a while."""
    return [
        EngineProcess(p, procinfo.start_time(p), title(p))
        for p in session(rec)
        if procinfo.ppid(p) == rec.pid and (procinfo.age_s(p) or 0.0) >= SETTLED_S
    ]


def session(rec: ServerRecord) -> list[int]:
    """The live processes of the server's session. A session's id is its first process's pid: once
    the server and all of its session are gone, the kernel may give that pid to a new process, and
    the session it begins (an SSH login, another program's daemon) then bears the same id. A live
    process under the server's pid that is not the server leads such a session: none of it is ours."""
    if rec.session == rec.pid and procinfo.start_time(rec.pid) not in (None, rec.start_time):
        return []
    return procinfo.session_members(rec.session, since=rec.start_time)


def title(pid: int) -> str:
    """How a process shows itself (vLLM's set their title: VLLM::EngineCore_DP1)."""
    return " ".join(procinfo.cmdline(pid))[:80] or "?"


def watch(paths: Paths, rec: ServerRecord) -> ServerRecord:
    """Add the children seen now to the record (engines may start after the launcher is ready)."""
    known = {(e.pid, e.start_time) for e in rec.engines}
    new = [c for c in children(rec) if (c.pid, c.start_time) not in known]
    if new:
        rec.engines = rec.engines + new
        rec.write(paths.server_pid)
    return rec


def gone(rec: ServerRecord) -> list[LeftoverProcess]:
    """Recorded engine processes that are no longer running."""
    return [LeftoverProcess(e.pid, e.start_time, e.what) for e in rec.engines if not e.alive()]


def processes(rec: ServerRecord) -> dict[int, int | None]:
    """Every process of the server a pid file records (pid -> start time): its session (renamed
    engine processes hide the token) and every process carrying its token (workers that left the
    session with setsid)."""
    found = {p: procinfo.start_time(p) for p in session(rec)}
    if rec.token:
        for p in kill.token_holders(SERVER_TOKEN_ENV, rec.token):
            found.setdefault(p, procinfo.start_time(p))
    return found


def leftovers(paths: Paths) -> list[LeftoverProcess]:
    """Processes of a server that died hard (kill -9, the OOM killer): vLLM's engine core and workers
    outlive their API server, re-parented to init but still in its session (`processes`), holding
    the GPUs. Their renaming (setproctitle) clobbers /proc/PID/environ too, so neither a name nor
    the token finds them: the session does."""
    rec = ServerRecord.read(paths.server_pid)
    if rec is None or rec.pid <= 0 or rec.alive():
        return []
    pids = processes(rec)
    gpu_mib = {a["pid"]: a["used_mib"] for a in machine.compute_apps() or []}
    return [
        LeftoverProcess(
            pid=pid,
            start_time=procinfo.start_time(pid),
            what=title(pid),
            rss_mib=procinfo.rss_mib(pid),
            gpu_mib=gpu_mib.get(pid),
        )
        for pid in sorted(pids)
    ]


def remove_leftovers(paths: Paths, grace: float = 10.0) -> list[LeftoverProcess]:
    found = leftovers(paths)
    if found:
        kill.terminate({p.pid: p.start_time for p in found}, grace)
    return found
