"""A server guarded by default, typed as a user types it (the CLI over the real sshd, the stand-in
`vllm` of tests/fake_vllm.py): it listens on loopback unless asked; asked to listen beyond it with no
key it is refused and nothing runs; with a key it refuses requests without it while the job, which
sends it, finishes; and the key is in no printout or log."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from deploytool.errors import ConfigError
from remote.common import procinfo
from remote.host.processes.server_process import get_url
from tests.conftest import (
    base_job,
    cli,
    free_port,
    record_ids,
    ssh_host_entry,
    wait_for,
    write_config,
    write_prompts,
)
from tests.helpers.stand_ins import fake_vllm

KEY = "sk-guarded-7f3a9c"


def project(tmp_path, ssh_rig, args=(), env=None, n=12):
    p = tmp_path / "p"
    p.mkdir(exist_ok=True)
    write_prompts(p / "data" / "prompts" / "B1.jsonl", n)
    port = free_port()
    job = base_job(
        engine={
            "kind": "openai",
            "base_url": f"http://127.0.0.1:{port}/v1",
            "model": "kimi",
            "concurrency": 4,
            "retry_base": 0.01,
        }
    )
    server = {
        "command": str(fake_vllm(tmp_path)),
        "model": "kimi",
        "port": port,
        "args": ["--fake-delay", "0.3", *args],
        "env": dict(env or {}),
        "ready_timeout": 30,
    }
    cfg = write_config(
        p, {"gpu": ssh_host_entry(ssh_rig, tmp_path / "host")}, job=job, server=server
    )
    return cfg, port, tmp_path / "host"


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a listening TCP socket on `port` (what `ss -ltn` shows)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                addr, hexport = cols[1].rsplit(":", 1)
                if cols[3] == "0A" and int(hexport, 16) == port:
                    if len(addr) == 8:
                        found.add(socket.inet_ntoa(bytes.fromhex(addr)[::-1]))
                    else:
                        found.add(addr)
    return found


def get(port: int, key: str | None = None) -> int:
    return get_url(f"http://127.0.0.1:{port}/v1/models", key=key)[0]


def test_the_server_listens_on_loopback_unless_asked(tmp_path, ssh_rig):
    cfg, port, host_dir = project(tmp_path, ssh_rig)
    try:
        assert cli(cfg, "deploy").returncode == 0
        res = cli(cfg, "server.start")
        assert res.returncode == 0, res.stdout + res.stderr
        rec = json.loads((host_dir / "run" / "server.pid").read_text())
        assert rec["argv"][rec["argv"].index("--host") + 1] == "127.0.0.1"
        assert listening_addresses(port) == {"127.0.0.1"}
        hosts = cli(cfg, "hosts")
        assert f"127.0.0.1:{port}, no key" in hosts.stdout, hosts.stdout
    finally:
        cli(cfg, "server.stop")


def test_beyond_loopback_without_a_key_is_refused_and_nothing_runs(tmp_path, ssh_rig):
    cfg_path = tmp_path / "p" / "hosts.yaml"
    with pytest.raises(ConfigError, match="listens on 0.0.0.0"):  # hosts.yaml itself is refused
        project(tmp_path, ssh_rig, args=("--host", "0.0.0.0"))
    res = cli(cfg_path, "server.start")
    assert res.returncode == 2 and res.stdout == ""
    line = res.stderr.strip()
    assert "\n" not in line and "listens on 0.0.0.0 (--host) and asks no API key" in line
    assert "server.env.VLLM_API_KEY" in line
    assert not (tmp_path / "host" / "run" / "server.pid").exists()
    assert not [
        p
        for p in procinfo.all_pids()
        if "fake_vllm" in " ".join(procinfo.cmdline(p))
        and str(tmp_path) in " ".join(procinfo.cmdline(p))
    ]


def test_a_keyed_server_refuses_requests_without_it_and_the_job_sending_it_finishes(
    tmp_path, ssh_rig
):
    cfg, port, host_dir = project(tmp_path, ssh_rig, env={"VLLM_API_KEY": KEY}, n=12)
    shown = []
    try:
        for args in (("deploy",), ("server.start",), ("restart", "--max-samples", "12")):
            res = cli(cfg, *args)
            shown.append(res.stdout + res.stderr)
            assert res.returncode == 0, shown[-1]
        assert get(port) == 401 and get(port, "wrong") == 401 and get(port, KEY) == 200
        res = cli(cfg, "tail")
        shown.append(res.stdout + res.stderr)
        assert res.returncode == 0, shown[-1]
        assert sorted(record_ids(host_dir, "B1")) == [f"B1-{i:06d}" for i in range(12)]
        for args in (("status",), ("status", "--json"), ("server.status",), ("hosts",)):
            res = cli(cfg, *args)
            shown.append(res.stdout + res.stderr)
        assert f"127.0.0.1:{port}, key" in shown[-1]
    finally:
        res = cli(cfg, "server.stop")
        shown.append(res.stdout + res.stderr)
    leaks = [i for i, text in enumerate(shown) if KEY in text]
    assert not leaks, [shown[i] for i in leaks]
    # on the host: only the files that must hold it (the server swap's record, which starts the
    # server with it, among them), each the owner's only
    holding = sorted(
        str(p.relative_to(host_dir))
        for p in Path(host_dir).rglob("*")
        if p.is_file() and KEY.encode() in p.read_bytes()
    )
    assert holding == ["run/keys.json", "run/supervise.json", "run/switch.json"], holding
    for name in holding:
        assert (host_dir / name).stat().st_mode & 0o077 == 0
    wait_for(lambda: listening_addresses(port) == set(), 10, what="the server gone")
