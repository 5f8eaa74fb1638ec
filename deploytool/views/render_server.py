"""Rich output of the server commands (start, stop, status, a data-parallel group's problems)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from .progress import count
from .progress import fmt_duration as _eta
from .progress import fmt_tokens as _tok
from .render import console

if TYPE_CHECKING:  # types only: answers load with the commands that build them
    from remote.common.answers import LeftoverProcess, ServerStarted, ServerState, ServerStopped


def _leftover_list(procs: list[LeftoverProcess]) -> str:
    def one(p: LeftoverProcess) -> str:
        mem = f"{p.rss_mib} MiB RAM" if p.rss_mib is not None else "? RAM"
        if p.gpu_mib:
            mem += f", {p.gpu_mib} MiB GPU"
        return f"pid {p.pid} {p.what} ({mem})"

    return "; ".join(one(p) for p in procs)


def server_started(r: ServerStarted, out: Console = console) -> None:
    if r.removed:
        out.print(
            f"{r.host}: removed {len(r.removed)} leftover processes of the dead server "
            f"first: {_leftover_list(r.removed)}",
            markup=False,
        )
    if r.already and not r.waited:
        out.print(f"[bold]{r.host}[/]: server already up (pid {r.pid}, {r.model} on port {r.port})")
        return
    where = "headless worker" if r.headless else f"on port {r.port}"
    by = (
        f" (started by {'the watcher' if r.by == 'watcher' else 'another server.start'})"
        if r.waited
        else ""
    )
    out.print(
        f"[bold]{r.host}[/]: server up: pid {r.pid}{by}, {r.model} {where}, "
        f"ready after {_eta(r.ready_after_s)}"
    )
    if r.argv:
        out.print(f"  command: {' '.join(r.argv)}", markup=False)
    if r.env:
        out.print("  env: " + " ".join(f"{k}={v}" for k, v in r.env.items()), markup=False)
    if r.headless:
        out.print(
            "  headless data-parallel worker: no HTTP, no smoke test (the head answers for the group)"
        )
    else:
        asked = f" (asked as {r.served_model!r})" if r.served_model else ""
        out.print(f"  smoke test: {(r.smoke or '')[:80]!r}{asked}", markup=False)


def server_stopped(r: ServerStopped, out: Console = console) -> None:
    if not r.was_running:
        if r.removed:
            out.print(
                f"{r.host}: no server was running; removed {len(r.removed)} leftover "
                f"processes of a dead one: {_leftover_list(r.removed)}",
                markup=False,
            )
        else:
            out.print(f"[bold]{r.host}[/]: no server was running")
        return
    line = f"[bold]{r.host}[/]: server pid {r.pid} stopped"
    if r.killed:
        line += f"; SIGKILL: {r.killed}"
    if r.gpu is None:
        line += "; no nvidia-smi (GPU memory not checked)"
    elif r.gpu.free:
        line += "; its GPU memory is free"
    else:
        line += f"; [red]GPU memory still held by {[a.pid for a in r.gpu.still_held_by]}[/]"
    out.print(line)


SIMULATED = "this host's job uses the built-in simulated engine (job.engine.kind: simulate)"


def needs_none(host: str, what: str, out: Console = console) -> None:
    """A host whose job's engine is the built-in stand-in: no server, as `invoke hosts` says."""
    out.print(f"[bold]{host}[/]: {what}: {SIMULATED}, which needs none")


def server_status(r: ServerState, out: Console = console, *, simulated: bool = False) -> None:
    if not r.up:
        if not r.leftovers and simulated:  # a server of its own would be said as any other
            needs_none(r.host, "no server", out)
            return
        if not r.leftovers:
            died = " (it died: nobody stopped it; see logs/server.log)" if r.died else ""
            out.print(f"[bold]{r.host}[/]: server down{died}")
            return
        out.print(
            f"{r.host}: server down, but {len(r.leftovers)} processes of the dead server are still "
            f"running: {_leftover_list(r.leftovers)}",
            markup=False,
        )
        out.print(
            "  they hold its memory (and GPUs): `invoke server.stop` removes them, and "
            "`invoke server.start` does before it starts a new server"
        )
        return
    where = "as a headless data-parallel worker" if r.headless else f"on port {r.port}"
    out.print(
        f"[bold]{r.host}[/]: server {'up' if r.ready else 'starting'}: pid {r.pid}, {r.model} "
        f"{where}, uptime {_eta(r.uptime_s)}"
    )
    if r.engines_gone:
        out.print(
            "  but its engine processes are gone: "
            + "; ".join(f"pid {p.pid} ({p.what})" for p in r.engines_gone),
            markup=False,
        )
    m = r.metrics
    if m:
        kv = f"{m.kv_cache:.0%}" if m.kv_cache is not None else "?"
        rate = _tok(m.generation_tokens_per_s) if m.generation_tokens_per_s is not None else "?"
        out.print(
            f"  requests running {count(m.running)}, waiting {count(m.waiting)}; KV cache {kv}; "
            f"generation {rate} tok/s"
        )


def group_problems(lines: list[str], out: Console = console) -> None:
    for line in lines:
        out.print(f"[bold red]data-parallel group broken[/]: {line}")
