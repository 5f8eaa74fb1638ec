"""Facts about processes from /proc, and small file helpers. Linux only (the GPU host)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path


def _stat_fields(pid: int, thread: str = "") -> list[str] | None:
    """/proc's stat of a process (or of one of its threads) past its name; None: gone."""
    try:
        with open(f"/proc/{pid}{thread and f'/task/{thread}'}/stat") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None  # gone (any other error is not a sign of that)
    # comm (field 2) may hold spaces and parentheses: split after the last ')'
    return data[data.rindex(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """Start time in clock ticks since boot: with the pid, it names one process for good."""
    f = _stat_fields(pid)
    return int(f[19]) if f else None


def age_s(pid: int) -> float | None:
    """Seconds since the process started."""
    st = start_time(pid)
    try:
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
    except (OSError, ValueError):
        return None
    return None if st is None else up - st / os.sysconf("SC_CLK_TCK")


def state(pid: int) -> str | None:
    f = _stat_fields(pid)
    return f[0] if f else None


def pgid(pid: int) -> int | None:
    f = _stat_fields(pid)
    return int(f[2]) if f else None


def ppid(pid: int) -> int | None:
    f = _stat_fields(pid)
    return int(f[1]) if f else None


def sid(pid: int) -> int | None:
    """Session id: Linux keeps a pid out of reuse while a live process has it as its session or
    group id, so a session outlives its leader as a safe name for what the leader started."""
    f = _stat_fields(pid)
    return int(f[3]) if f else None


def rss_mib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError, IndexError):
        return None
    return 0  # a kernel thread or a zombie: no resident memory


def session_members(session: int, since: int | None = None) -> list[int]:
    """Live processes of this user in `session`, started at or after `since` (clock ticks)."""
    me = os.getuid()
    out = []
    for pid in all_pids():
        if sid(pid) != session or uid(pid) != me or not alive(pid):
            continue
        st = start_time(pid)
        if since is not None and (st is None or st < since):
            continue
        out.append(pid)
    return sorted(out)


def alive(pid: int) -> bool:
    """Running, or exiting with a thread still running: its first thread shows Z as soon as it ends,
    while the others still hold the process's open files (a lock among them)."""
    s = state(pid)
    if s is None:
        return False
    if s not in ("Z", "X"):
        return True
    return any(t not in ("Z", "X") for t in thread_states(pid))


def thread_states(pid: int) -> list[str]:
    """Each thread's state letter, as /proc says (none for a process gone)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    return [f[0] for f in (_stat_fields(pid, t) for t in threads) if f]


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []


def cwd(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except (FileNotFoundError, ProcessLookupError):
        return None


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def tail_lines(
    path, n: int, window: int = 256 * 1024, without: str | None = None, since: int = 0
) -> list[str]:
    """The last n lines of a (log) file (those holding `without` left out), reading at most
    `window` bytes from its end, none before byte `since` (what another process wrote before)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(since, f.tell() - window))
            lines = f.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    return [line for line in lines if without is None or without not in line][-n:]


_WHY_LINE = re.compile(r"error|exception|traceback|killed|fatal|illegal|out of memory|xid", re.I)


def why_lines(lines: list[str], n: int = 8) -> list[str]:
    """The lines of a log's tail that say why a process died: its errors, else its last lines."""
    why = [line for line in lines if _WHY_LINE.search(line)]
    return (why or lines)[-n:]


def under(path: str | None, root: Path) -> bool:
    return bool(path) and Path(path).resolve().is_relative_to(root.resolve())


def start_detached(argv: list[str], *, cwd, env: dict, log, pass_fds=()) -> subprocess.Popen:
    """Start argv in a session of its own, no terminal, output to the open log file: it outlives the
    SSH command that started it. `pass_fds`: the only open files it inherits."""
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
        close_fds=True,
        pass_fds=pass_fds,
    )


def descendants(roots: set[int]) -> set[int]:
    """The roots and every process below them."""
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        parent = ppid(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    out, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, []))
    return out
