"""Where the everyday tier's CPU goes, by the kind of process: pytest workers, each `invoke` command,
each host-side command over SSH, runners, watchers, fake servers, sshd, shells.

    .venv/bin/python bench/bench_test_cpu.py [--top 30] [pytest args, e.g. tests/test_recovery.py]

Runs `scripts/test.sh` with the kernel's process accounting on (every process that ends, killed
or not, is written with its CPU time; needs root) and a sampler that reads each new process's
command line from /proc every 20 ms (a process that ends sooner is named by its 16-character
command name only). Prints the machine's busy CPU over the run beside its wall time, then CPU by
kind. Processes still running at the end (sshd's listener) are not in the table.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import os
import re
import resource
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime,
# then eight comp_t (utime, stime, mem, io, rw, minflt, majflt, swaps) and the command name
ACCT_V3 = struct.Struct("<BBHIIIIIIf8H16s")
AHZ = 100


def comp_t(value: int) -> int:
    """The kernel's 13-bit mantissa, 3-bit base-8 exponent count of ticks."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def read_acct(path: Path):
    data = path.read_bytes()
    for off in range(0, len(data) - ACCT_V3.size + 1, ACCT_V3.size):
        rec = ACCT_V3.unpack_from(data, off)
        if rec[1] & 0x7F != 3:
            continue
        pid, ppid, utime, stime = rec[6], rec[7], comp_t(rec[10]), comp_t(rec[11])
        comm = rec[18].split(b"\0")[0].decode(errors="replace")
        yield pid, ppid, (utime + stime) / AHZ, comm


def busy_and_total() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


class Sampler(threading.Thread):
    """pid -> command line of every process seen alive (a pid's last owner wins)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.names: dict[int, list[str]] = {}
        self.tests: dict[int, str | None] = {}
        self.stop = threading.Event()

    def run(self):
        seen: set[int] = set()
        fresh: set[int] = set()
        while not self.stop.wait(0.02):
            now = {int(p) for p in os.listdir("/proc") if p.isdigit()}
            # read again once, a look later: a child seen between its fork and its exec still
            # showed its parent's command line
            for pid in (now - seen) | (fresh & now):
                self._read(pid)
            fresh, seen = now - seen, now

    def _read(self, pid: int) -> None:
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return
        if raw:
            self.names[pid] = raw.decode(errors="replace").rstrip("\0").split("\0")
            self.tests[pid] = which_test(pid, self.names[pid])


def which_test(pid: int, argv: list[str]) -> str | None:
    """The test a process works for: pytest's PYTEST_CURRENT_TEST where it inherited the worker's
    environment, else the test's temporary folder in its working directory or command line (a
    runner started over SSH, a host command run in the host's remote_dir)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        for var in env:
            if var.startswith(b"PYTEST_CURRENT_TEST="):
                return var.split(b"=", 1)[1].decode(errors="replace").split(" ")[0]
    except OSError:
        pass
    try:
        where = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        where = ""
    for text in (where, " ".join(argv)):
        m = TMP_TEST.search(text)
        if m:
            return "tmp:" + m.group(1)
    return None


# pytest's tmp_path: .../pytest-of-USER/pytest-N/[popen-gwK/]test_name0/
TMP_TEST = re.compile(r"pytest-of-[^/]+/pytest-\d+/(?:popen-gw\d+/)?(test_[^/ ]*?)\d*(?:/|\s|$)")


def kind(argv: list[str] | None, comm: str) -> str:
    if not argv:
        return f"(unnamed) {comm}"
    text = " ".join(argv)
    if "-m tests." in text:
        return "test server: " + text.split("-m tests.", 1)[1].split()[0]
    if "-m remote" in text:
        rest = text.split("-m remote", 1)[1].split()
        sub = " ".join(rest[:2] if rest[:1] == ["ctl"] else rest[:1])
        return f"host: remote {sub}".rstrip()
    # xdist's workers are execnet's `python -c "...exec(eval(sys.stdin.readline()))"`
    if "-m pytest" in text or "sys.stdin.readline" in text:
        return "pytest (main and workers)"
    for i, arg in enumerate(argv):
        if arg.endswith("/invoke") or arg.endswith("/deploytool") or arg == "deploytool":
            rest = argv[i + 1 :]
            while rest[:1] and rest[0].startswith("-"):
                rest = rest[2:] if rest[0] in ("--config", "-f", "--hosts") else rest[1:]
            task = rest[0] if rest else ""
            return f"local: {Path(arg).name} {task}".rstrip()
        if arg.endswith(".py") and "/tests/" in arg:
            return f"test server: {Path(arg).name}"
    exe = Path(argv[0]).name
    if exe.startswith("sshd") or text.startswith("sshd"):
        return "sshd (per connection)"
    return exe if exe not in ("sh", "bash") else f"{exe} (shell)"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--dump", type=Path, help="write each ended process (kind, cpu, argv) here")
    args, pytest_args = parser.parse_known_args()
    libc = ctypes.CDLL(None, use_errno=True)
    acct = Path(tempfile.mkstemp(prefix="deploytool-acct-")[1])
    if libc.acct(str(acct).encode()) != 0:
        print(f"process accounting unavailable: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 1
    sampler = Sampler()
    sampler.start()
    busy0, total0 = busy_and_total()
    t0 = time.monotonic()
    try:
        rc = subprocess.call(
            ["bash", "scripts/test.sh", "-q", "-p", "no:cacheprovider", *pytest_args], cwd=REPO
        )
    finally:
        wall = time.monotonic() - t0
        busy1, total1 = busy_and_total()
        libc.acct(None)
        sampler_died = not sampler.is_alive()
        sampler.stop.set()
    ncpu = os.cpu_count() or 1
    busy_s = (busy1 - busy0) / os.sysconf("SC_CLK_TCK")
    idle_s = ((total1 - total0) - (busy1 - busy0)) / os.sysconf("SC_CLK_TCK")
    print(
        f"\nexit {rc}; wall {wall:.1f} s on {ncpu} CPUs; machine busy {busy_s:.1f} CPU-s, idle {idle_s:.1f} CPU-s"
    )
    if sampler_died:
        print("the command-line sampler died during the run: processes are named by comm only")
    own = resource.getrusage(resource.RUSAGE_SELF)
    print(f"this benchmark's own sampling: {own.ru_utime + own.ru_stime:.1f} CPU-s")
    by_kind: dict[str, list[float]] = collections.defaultdict(list)
    rows = []
    for pid, ppid, cpu, comm in read_acct(acct):
        argv = sampler.names.get(pid)
        by_kind[kind(argv, comm)].append(cpu)
        test = sampler.tests.get(pid)
        rows.append(
            {
                "kind": kind(argv, comm),
                "cpu": cpu,
                "pid": pid,
                "ppid": ppid,
                "argv": argv,
                "test": test,
            }
        )
    rows_by_process = rows
    if args.dump:
        args.dump.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    acct.unlink()
    counted = sum(sum(v) for v in by_kind.values())
    print(f"ended processes: {sum(len(v) for v in by_kind.values())}, {counted:.1f} CPU-s\n")
    print(f"{'CPU-s':>8} {'share':>6} {'count':>6} {'mean s':>7}  kind")
    rows = sorted(by_kind.items(), key=lambda kv: -sum(kv[1]))
    for name, cpus in rows[: args.top]:
        total = sum(cpus)
        print(
            f"{total:8.1f} {total / counted:6.1%} {len(cpus):6d} {total / len(cpus):7.3f}  {name}"
        )
    by_test: dict[str, float] = collections.defaultdict(float)
    for row in rows_by_process:
        by_test[row["test"] or "(no test named)"] += row["cpu"]
    print("\nby test: CPU of the processes each started (its worker's own CPU not counted)")
    for name, total in sorted(by_test.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{total:8.1f}  {name}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
