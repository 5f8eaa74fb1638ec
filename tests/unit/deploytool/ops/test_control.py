"""The one way the local side asks a host anything: the command it sends (from the current
release, with -S), the typed answer it reads back, and each way that can fail said in one line
with its fix (nothing deployed, another release's protocol, no answer, a fault from the host).
A stand-in connector answers as a host would."""

from __future__ import annotations

import io
import json

import pytest

from deploytool.config import HostConfig
from deploytool.connectors.base import Connector, Result
from deploytool.errors import RemoteError, UsageError
from deploytool.ops import control
from remote.common.answers import PreflightProblem, StopAnswer
from remote.common.protocol import CtlStop
from remote.common.wire import Fault, envelope, fault_envelope, to_wire
from tests.conftest import base_job, write_config


class Host(Connector):
    """Answers every command with one canned Result and keeps what it was sent."""

    def __init__(self, result: Result):
        self.host = HostConfig(name="gpu1", python="/opt/vllm/bin/python")
        self.remote_dir = "/srv/job"
        self.result, self.sent = result, []

    def run(self, argv, *, cwd=None, env=None, stdin=None, timeout=None):
        self.sent.append((argv, cwd))
        self.stdin = stdin
        return self.result

    def start(self, argv, *, cwd=None, env=None):
        raise NotImplementedError

    read_range = size = start


def answering(data, code=0, err=b"") -> Host:
    return Host(Result(code, b"a log line first\n" + json.dumps(data).encode() + b"\n", err))


def test_the_request_runs_from_the_current_release_and_its_answer_comes_back_typed():
    host = answering(envelope(StopAnswer(was_running=True, stopped=[41])))
    got = control.stop(host, grace=5)
    assert isinstance(got, StopAnswer) and got.stopped == [41] and got.host == "gpu1"
    argv, cwd = host.sent[0]
    assert cwd is None and argv[:2] == ["sh", "-c"]
    assert argv[2].startswith("cd /srv/job 2>/dev/null || exit 96;") and "cd current" in argv[2]
    assert argv[4:] == ["/opt/vllm/bin/python", "-S", "-m", "remote", "--request"]
    # the request itself is data on stdin, read back on the host as the same typed request
    from remote.cli import read_request

    assert read_request(io.StringIO(host.stdin.decode())) == CtlStop(grace=5)


def test_a_servers_key_and_environment_never_stand_on_a_command_line():
    from remote.common.jobspec import ServerSpec
    from remote.common.protocol import CtlKeys, ServerStart

    for request in (
        CtlKeys(keys={"http://127.0.0.1:8000/v1": "sk-secret"}),
        ServerStart(
            spec=ServerSpec(args=("--api-key", "sk-secret"), env={"HF_TOKEN": "hf_secret"})
        ),
    ):
        host = answering({"protocol": 0})
        with pytest.raises(RemoteError):
            control.call(host, request)
        argv, _ = host.sent[0]
        assert "secret" not in " ".join(argv) and b"secret" in host.stdin


def test_nothing_deployed_says_to_deploy(tmp_path):
    with pytest.raises(RemoteError, match=r"nothing deployed in /srv/job: run `invoke deploy`"):
        control.stop(Host(Result(97, b"", b"")))
    # told by the exit code alone, for real: no remote_dir at all, and one with no release in it
    from deploytool.connectors.local import LocalConnector

    said = {
        tmp_path / "none": ", no such folder on the host (a typo in hosts.yaml's remote_dir?",
        tmp_path: ": run `invoke deploy` first",
    }
    for where, then in said.items():
        conn = LocalConnector(
            HostConfig(name="box", connect="local", remote_dir=str(where)), tmp_path
        )
        with pytest.raises(RemoteError) as e:
            control.job_status(conn)
        assert str(e.value).startswith(f"nothing deployed in {where}{then}"), str(e.value)


def test_another_releases_protocol_or_no_answer_at_all_is_one_line():
    old = answering({"ok": True, "answer": {}})  # a release from before the envelope's version
    with pytest.raises(RemoteError, match=r"speaks protocol 1, this deploytool .*invoke deploy"):
        control.stop(old)
    renamed = envelope(StopAnswer(was_running=True))
    renamed["answer"]["was_runing"] = renamed["answer"].pop("was_running")  # another release's
    with pytest.raises(RemoteError, match=r"unknown fields.*another release: run `invoke deploy`"):
        control.stop(answering(renamed))
    crashed = Host(Result(1, b"", b"Traceback...\nImportError: no module x\n"))
    with pytest.raises(RemoteError) as e:
        control.stop(crashed)
    assert str(e.value) == "`remote ctl stop` failed (exit 1): ImportError: no module x"


def test_a_fault_from_the_host_carries_its_fix_and_log_lines():
    fault = Fault("busy", "a runner is running", fix="stop it first", log=["l1", "l2"])
    with pytest.raises(RemoteError) as e:
        control.stop(answering(fault_envelope(fault), code=1))
    assert str(e.value) == "a runner is running: stop it first" and e.value.details == ("l1", "l2")
    problem = PreflightProblem("/usr/bin/python3", "openai", {"aiohttp": "ModuleNotFoundError"})
    pre = Fault("preflight", "x", detail={"problem": to_wire(problem)})
    with pytest.raises(RemoteError) as e:
        control.stop(answering(fault_envelope(pre), code=1))
    out = str(e.value)
    assert out.startswith("nothing was stopped: the host's python (/usr/bin/python3) cannot import")
    assert "aiohttp (ModuleNotFoundError)" in out and "hosts.gpu1.python" in out


def test_run_flags_are_checked_against_hosts_yaml_before_any_host(tmp_path):
    cfg = write_config(tmp_path, {"gpu1": {"host": "127.0.0.1"}}, job=base_job())
    assert control.parse_run_flags(cfg, datasets="B1").named_datasets() == ["B1"]
    with pytest.raises(
        UsageError,
        match=r"unknown dataset B9; hosts.yaml has B1 \(a new one goes under job.datasets there, "
        r"then `invoke deploy`\)",
    ):
        control.parse_run_flags(cfg, datasets="B1,B9")
