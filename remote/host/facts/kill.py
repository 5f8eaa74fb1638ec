"""Stopping process trees safely: identity checked before every signal, TERM, grace, KILL, and
every process that carries the job's token (workers re-parented or in groups of their own)."""

from __future__ import annotations

import os
import signal
import time

from ...common import procinfo


def signal_if_same(pid: int, start: int | None, sig: int, group: bool) -> bool:
    """Signal pid (or its group) only if it is still the process we identified (pids are reused)."""
    if procinfo.start_time(pid) != start or not procinfo.alive(pid):
        return False
    try:
        if group and procinfo.pgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def wait_gone(targets: dict[int, int | None], timeout: float) -> list[int]:
    """Wait until none of the (pid -> start time) targets lives; returns those still alive."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [
            p for p, st in targets.items() if procinfo.alive(p) and procinfo.start_time(p) == st
        ]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def token_holders(env_key: str, token: str) -> list[int]:
    """Every process of this user whose environment carries the token."""
    me = os.getuid()
    return [
        pid
        for pid in procinfo.all_pids()
        if pid != os.getpid()
        and procinfo.uid(pid) == me
        and procinfo.environ(pid).get(env_key) == token
    ]


def terminate(
    targets: dict[int, int | None],
    grace: float,
    env_key: str | None = None,
    token: str | None = None,
) -> list[int]:
    """SIGTERM each target's group, wait `grace`, SIGKILL what is left and every token holder.
    Returns the pids that needed SIGKILL."""
    for pid, st in targets.items():
        signal_if_same(pid, st, signal.SIGTERM, group=True)
    killed = [
        pid
        for pid in wait_gone(targets, grace)
        if signal_if_same(pid, targets[pid], signal.SIGKILL, group=True)
    ]
    if env_key and token:
        for pid in token_holders(env_key, token):
            if signal_if_same(pid, procinfo.start_time(pid), signal.SIGKILL, group=False):
                killed.append(pid)
    wait_gone({p: procinfo.start_time(p) for p in killed}, 5)
    return sorted(set(killed))
