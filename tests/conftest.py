"""Test rig: a real OpenSSH sshd on 127.0.0.1, a real OpenAI-compatible server, and isolation from the
developer's own ~/.ssh, agent and hosts.yaml."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import settings

from deploytool.config import load_config
from remote.common.jobspec import Paths

# hypothesis fails an example that takes over 200 ms: a wall-clock margin a busy machine overruns
# (790 ms for one parse_tokens example in a load proof), not a check of the code
settings.register_profile("deploytool", deadline=None)
settings.load_profile("deploytool")

REPO = Path(__file__).resolve().parent.parent
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# no wait gives up sooner: a busy machine (eight tests at a time beside real vLLM) makes a step
# of a few seconds take a minute, and a ceiling never slows a test that passes
WAIT_CEILING_S = 120.0


def wait_for(predicate, timeout=WAIT_CEILING_S, interval=0.05, what="condition"):
    """Readiness by polling, never a fixed sleep; `timeout` below the ceiling is raised to it."""
    timeout = max(timeout, WAIT_CEILING_S)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def runner_time_passes(root: Path, seconds: float) -> None:
    """Waits until the runner's own clock has moved `seconds` on, as status.json says (written each
    second, in the tick that then runs its checks): "nothing happened for a while" counted in the
    runner's turns, which a busy machine slows down with it, not in the test's wall clock."""
    first = status(root)["updated_at"]
    wait_for(
        lambda: (status(root)["updated_at"] or 0) >= first + seconds,
        what=f"the runner's clock {seconds}s on",
    )


def kill_if_same(started: dict[int, int | None]) -> None:
    """SIGKILL each pid that is still the process that started then: one that ended since may be
    another's by now (a test's teardown must never kill a stranger)."""
    from remote.host.facts.kill import signal_if_same

    for pid, st in started.items():
        signal_if_same(pid, st, signal.SIGKILL, group=False)


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


class Sshd:
    """One sshd process with its own host key, on a free port."""

    def __init__(
        self, root: Path, authorized: Path, host_key: Path | None = None, port: int | None = None
    ):
        self.root = root
        self.port = port or free_port()
        self.host_key = host_key or keygen(root / "ssh_host_ed25519_key")
        self.config = root / "sshd_config"
        self.config.write_text(f"""
Port {self.port}
ListenAddress 127.0.0.1
HostKey {self.host_key}
PidFile {root}/sshd.pid
AuthorizedKeysFile {authorized}
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
UsePAM no
StrictModes no
PermitRootLogin yes
AllowAgentForwarding yes
Subsystem sftp internal-sftp
LogLevel ERROR
MaxSessions 100
MaxStartups 100
# bash reads the user's ~/.bashrc for a command sent over SSH when SHLVL says it is the first
# shell: the developer's own start-up files (pyenv or conda init, ~15 processes a command) are not
# the tests' to run, as their ~/.ssh and hosts.yaml are not
SetEnv SHLVL=1
""")
        self.proc = None

    def start(self) -> "Sshd":
        Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation dir when running as root
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "sshd.log", "ab"),
        )

        def banner():
            if self.proc.poll() is not None:
                raise AssertionError(f"sshd exited: {(self.root / 'sshd.log').read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    return s.recv(64).startswith(b"SSH-")
            except OSError:
                return False

        wait_for(banner, what="sshd banner")
        return self

    def stop(self) -> None:
        """Stop the listener and drop every session it serves (as a host going away would)."""
        if self.proc and self.proc.poll() is None:
            from remote.common import procinfo

            sessions = {
                p: procinfo.start_time(p)
                for p in procinfo.all_pids()
                if procinfo.ppid(p) == self.proc.pid
            }
            self.proc.terminate()
            self.proc.wait(10)
            kill_if_same(sessions)

    def known_hosts_line(self) -> str:
        pub = Path(str(self.host_key) + ".pub").read_text().split()
        return f"[127.0.0.1]:{self.port} {pub[0]} {pub[1]}\n"


@pytest.fixture(scope="session")
def ssh_rig(tmp_path_factory):
    if not os.path.exists(SSHD):
        pytest.fail(
            "OpenSSH sshd is not installed: run the README test command (it installs openssh-server)"
        )
    root = tmp_path_factory.mktemp("sshd")
    client_key = keygen(root / "id_client")
    authorized = root / "authorized_keys"
    authorized.write_text(Path(str(client_key) + ".pub").read_text())
    sshd = Sshd(root, authorized).start()
    known = root / "known_hosts"
    known.write_text(sshd.known_hosts_line())
    yield {
        "sshd": sshd,
        "client_key": client_key,
        "known_hosts": known,
        "root": root,
        "authorized": authorized,
    }
    sshd.stop()


@pytest.fixture(autouse=True)
def isolate_user(tmp_path, monkeypatch):
    """Keep the developer's ~/.ssh (config, keys, known_hosts), agent and hosts.yaml out of every test."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("DEPLOYTOOL_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)


def ssh_host_entry(rig, remote_dir: Path | str, **extra) -> dict:
    entry = {
        "host": "127.0.0.1",
        "port": rig["sshd"].port,
        "user": getpass.getuser(),
        "identity_file": str(rig["client_key"]),
        "known_hosts": str(rig["known_hosts"]),
        "remote_dir": str(remote_dir),
        "python": sys.executable,
    }
    entry.update(extra)
    return entry


def base_job(datasets: dict | None = None, engine: dict | None = None) -> dict:
    return {
        "datasets": datasets or {"B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": 1577}},
        "engine": engine or {"kind": "simulate", "concurrency": 8, "tokens_per_s": 1_000_000},
        "sampling": {"max_tokens": 8192, "temperature": 1.0},
        "chat_template_kwargs": {"thinking": True},
    }


def write_config(
    dir_: Path, hosts: dict, job: dict | None = None, default_host: str | None = None, **top
):
    data = {
        "default_host": default_host or next(iter(hosts)),
        "hosts": hosts,
        "job": job or base_job(),
    }
    # the watcher would heal the deaths other tests make on purpose: only the recovery tests (and the
    # shipped hosts.yaml) have it on
    top.setdefault("recover", False)
    data.update(top)
    path = dir_ / "hosts.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_config(path)


def write_prompts(path: Path, n: int, dataset: str = "B1", fmt: str = "messages") -> list[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    ids = []
    with open(path, "w") as f:
        for i in range(n):
            q = f"question {i} of {dataset}"
            if fmt == "messages":
                obj = {"id": f"{dataset}-{i:06d}", "messages": [{"role": "user", "content": q}]}
            else:
                obj = {"prompt": q}
            f.write(json.dumps(obj) + "\n")
            ids.append(f"{dataset}-{i:06d}")
    return ids


class Project:
    """A project folder (hosts.yaml, data/prompts) for a job on the test sshd host: the one way
    test modules make one. `make(...)` writes the prompts and hosts.yaml; the job is stopped at the
    end of the test, whatever it did."""

    def __init__(self, tmp_path: Path, rig: Sshd):
        self.rig, self.proj, self.host_dir = rig, tmp_path / "p", tmp_path / "host"
        self.proj.mkdir()
        self.made = False

    def make(self, prompts=None, *, engine=None, fmt=None, est_tokens=100, sampling=None,
             extra_body=None, **host):  # fmt: skip
        """prompts: {dataset: n} (B1 and B2, 40 each, by default); fmt: {dataset: prompt format};
        engine: job.engine over the OpenAI defaults; host: more of the host's hosts.yaml entry.
        Returns the loaded config."""
        prompts = prompts or {"B1": 40, "B2": 40}
        for ds, n in prompts.items():
            path = self.proj / "data" / "prompts" / f"{ds}.jsonl"
            write_prompts(path, n, ds, fmt=(fmt or {}).get(ds, "messages"))
        spec = base_job(
            datasets={
                ds: {"prompts": f"data/prompts/{ds}.jsonl", "est_tokens": est_tokens}
                for ds in prompts
            },
            engine={"kind": "openai", "model": "test-model", "retry_base": 0.01, **(engine or {})},
        )
        if sampling is not None:
            spec["sampling"] = sampling
        if extra_body is not None:
            spec["extra_body"] = extra_body
        self.made = True
        entry = ssh_host_entry(self.rig, self.host_dir, **host)
        return write_config(self.proj, {"gpu": entry}, job=spec)


@pytest.fixture
def project(tmp_path, ssh_rig):
    p = Project(tmp_path, ssh_rig)
    yield p
    if p.made:
        cli(p.proj / "hosts.yaml", "stop", "--grace", "0", timeout=60)


@pytest.fixture
def openai_server():
    from tests.openai_server import FakeOpenAI

    servers = []

    def make(**kw):
        srv = FakeOpenAI(**kw).start()
        servers.append(srv)
        return srv

    yield make
    for s in servers:
        s.stop()


def cli(config, *args: str, timeout: float = 180, cwd=None) -> subprocess.CompletedProcess:
    """`deploytool --config CONFIG ARGS` as a user runs it (CONFIG: a loaded Config or a path)."""
    path = config if isinstance(config, (str, Path)) else config.path
    return subprocess.run(
        [sys.executable, "-m", "deploytool", "--config", str(path), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=piped_env(),
    )


def ctrl_c_as_typed() -> None:
    """A child's preexec_fn: Ctrl-C reaches it as in a terminal. A shell's background job (a suite
    started with `&`, as a load test does) has SIGINT ignored, and Python then leaves it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def piped_env() -> dict:
    """The environment of a command whose output is piped, as a user's shell has it: pytest sets
    COLUMNS=80 for its own children, which would fold every line the tool prints."""
    return {k: v for k, v in os.environ.items() if k != "COLUMNS"}


def outputs(root: Path) -> Path:
    """data/outputs of a host's remote_dir (Paths says where, once)."""
    return Paths(root).outputs


def _lines(p: Path) -> list[dict]:
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


def records(root: Path, ds: str) -> list[dict]:
    """Every record of a dataset on a host's remote_dir (every line must be valid JSON)."""
    return _lines(Paths(root).output(ds))


def record_ids(root: Path, ds: str) -> list[str]:
    return [r["id"] for r in records(root, ds)]


def error_lines(root: Path, ds: str) -> list[dict]:
    """<DS>.errors.jsonl of a host's remote_dir."""
    return _lines(Paths(root).errors(ds))


def status(root: Path) -> dict:
    """run/status.json of a host's remote_dir, as the runner wrote it."""
    return json.loads((root / "run" / "status.json").read_text())


def runner_cmd(root: Path, *args: str) -> list[str]:
    """The runner in the foreground, on a remote_dir that holds its own job.json (tests and benchmarks)."""
    return [
        sys.executable,
        "-m",
        "remote",
        "run",
        "--root",
        str(root),
        "--job",
        str(root / "job.json"),
        *args,
    ]


def restart_unwatched(*args, **kw):
    """control.restart with the host's watcher off: for tests that make deaths on purpose and look
    at them (the recovery tests turn it on)."""
    from deploytool.ops import control
    from remote.common.recover import RecoverSpec

    return control.restart(*args, recover=RecoverSpec(enabled=False), **kw)


def start_unwatched(*args, **kw):
    """server.start with the host's watcher off (as restart_unwatched)."""
    from deploytool.ops import server
    from remote.common.recover import RecoverSpec

    return server.start(*args, recover=RecoverSpec(enabled=False), **kw)


def pytest_collection_modifyitems(config, items):
    """Under xdist each worker collects, in the same order: the order is dealt there."""
    from tests.helpers.order import dealt

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers > 1:
        order = dealt(items, workers)
        assert sorted(map(id, order)) == sorted(map(id, items)), "every test dealt once"
        items[:] = order
