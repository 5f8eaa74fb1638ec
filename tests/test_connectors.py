"""The connector contract, over a real sshd and the local connector alike."""

import subprocess
import sys
from pathlib import Path

import pytest

from deploytool.config import HostConfig
from deploytool.connectors import connect, shell_command
from deploytool.errors import ConnectError, ExitCode
from tests.conftest import Sshd, free_port, keygen, ssh_host_entry, write_config

WEIRD = "we ird 'quoted' \"dq\" $HOME `x`.txt"


@pytest.fixture(params=["ssh", "local"])
def conn(request, tmp_path):
    remote = tmp_path / "remote"
    remote.mkdir()
    if request.param == "ssh":
        rig = request.getfixturevalue("ssh_rig")
        cfg = write_config(tmp_path, {"h": ssh_host_entry(rig, remote)})
    else:
        cfg = write_config(tmp_path, {"h": {"connect": "local", "remote_dir": str(remote)}})
    c = connect(cfg.hosts["h"], cfg)
    yield c
    c.close()


def test_run_argv_is_quoted_not_interpreted(conn):
    res = conn.run(["printf", "%s|", "a b", "$HOME", "; rm -rf /", "it's"])
    assert res.ok, res.err
    assert res.out == "a b|$HOME|; rm -rf /|it's|"


def test_run_reports_exit_code_stderr_and_stdin(conn):
    res = conn.run(
        [
            "python3",
            "-c",
            "import sys; d=sys.stdin.buffer.read(); sys.stdout.buffer.write(d[::-1]); sys.exit(3)",
        ],
        stdin=b"\x00\x01binary" * 1000,
    )
    assert res.exit_code == 3
    assert res.stdout == (b"\x00\x01binary" * 1000)[::-1]


def test_run_cwd_and_env(conn):
    res = conn.run(["sh", "-c", 'pwd; echo "$FOO"'], cwd=conn.remote_dir, env={"FOO": "b a r"})
    assert res.ok
    lines = res.out.splitlines()
    assert Path(lines[0]).resolve() == Path(conn.remote_dir).resolve() and lines[1] == "b a r"


def test_read_range_byte_identical_with_weird_names(conn):
    data = bytes(range(256)) * 1024 + b"\n\r\x00end"
    remote_path = f"{conn.remote_dir}/sub dir/{WEIRD}"
    conn.run(["mkdir", "-p", f"{conn.remote_dir}/sub dir"])
    assert conn.run(["sh", "-c", 'cat > "$1"', "sh", remote_path], stdin=data).ok
    assert b"".join(conn.read_range(remote_path, 0, len(data))) == data


def test_start_converses_over_one_session(conn):
    p = conn.start(
        [
            sys.executable,
            "-c",
            "import sys\nfor line in sys.stdin:\n    print(line.strip().upper(), flush=True)\n"
            "sys.stderr.write('bye')\nsys.exit(4)",
        ]
    )
    p.write(b"hello\n")
    assert p.readline() == b"HELLO\n"  # an answer comes back before stdin is closed
    p.write(b"again\n")
    assert p.readline() == b"AGAIN\n"
    p.close_stdin()
    res = p.finish()
    assert res.exit_code == 4 and res.err == "bye"


def test_a_command_that_ends_before_reading_its_input_is_told_by_finish(conn):
    # what is still sent to it is dropped, as a pipe to an ended process; the connection lives on
    proc = conn.start(["sh", "-c", "echo why it stopped >&2; exit 3"])
    proc.write(b"\x00" * (64 << 20))  # far more than SSH's window: the send meets the end
    proc.close_stdin()
    res = proc.finish()
    assert res.exit_code == 3 and res.err.strip() == "why it stopped"
    assert conn.run(["echo", "still here"]).out == "still here\n"


def test_shell_command_is_the_one_quoting_place():
    assert (
        shell_command(["ls", "a b"], cwd="~/x y", env={"K": "v w"})
        == "cd \"$HOME\"/'x y' && env 'K=v w' ls 'a b'"
    )


# ------------------------------------------------------------------ SSH failures, each one clear line


def _connect_err(cfg, name="h") -> ConnectError:
    c = connect(cfg.hosts[name], cfg)
    with pytest.raises(ConnectError) as e:
        c.run(["true"])
    c.close()
    assert e.value.code == ExitCode.FAILED
    assert "\n" not in str(e.value)
    return e.value


def test_unknown_host_key_refused_by_default_with_fingerprint(ssh_rig, tmp_path):
    empty = tmp_path / "kh"
    empty.write_text("")
    cfg = write_config(tmp_path, {"h": ssh_host_entry(ssh_rig, tmp_path, known_hosts=str(empty))})
    err = _connect_err(cfg)
    fp = subprocess.run(
        ["ssh-keygen", "-lf", str(ssh_rig["sshd"].host_key) + ".pub"],
        capture_output=True,
        text=True,
    ).stdout.split()[1]
    assert "unknown host key" in str(err) and fp in str(err)
    assert "accept-new" in str(err)
    assert empty.read_text() == ""  # nothing trusted behind the user's back


def test_accept_new_trusts_on_first_use_then_is_strict(ssh_rig, tmp_path):
    kh = tmp_path / "kh"
    cfg = write_config(
        tmp_path,
        {"h": ssh_host_entry(ssh_rig, tmp_path, known_hosts=str(kh), host_key="accept-new")},
    )
    c = connect(cfg.hosts["h"], cfg)
    assert c.run(["true"]).ok
    c.close()
    assert f"[127.0.0.1]:{ssh_rig['sshd'].port} ssh-ed25519" in kh.read_text()
    # the recorded key is now enforced even in strict mode
    cfg2 = write_config(tmp_path, {"h": ssh_host_entry(ssh_rig, tmp_path, known_hosts=str(kh))})
    c2 = connect(cfg2.hosts["h"], cfg2)
    assert c2.run(["true"]).ok
    c2.close()


def test_changed_host_key_is_refused_even_with_accept_new(ssh_rig, tmp_path):
    other = keygen(tmp_path / "other_key")
    kh = tmp_path / "kh"
    pub = Path(str(other) + ".pub").read_text().split()
    kh.write_text(f"[127.0.0.1]:{ssh_rig['sshd'].port} {pub[0]} {pub[1]}\n")
    for mode in ("strict", "accept-new"):
        cfg = write_config(
            tmp_path, {"h": ssh_host_entry(ssh_rig, tmp_path, known_hosts=str(kh), host_key=mode)}
        )
        err = _connect_err(cfg)
        assert "HOST KEY CHANGED" in str(err) and "ssh-keygen" in str(err) and "-R" in str(err)


def test_wrong_client_key_gives_auth_failure_line(ssh_rig, tmp_path):
    wrong = keygen(tmp_path / "wrong")
    cfg = write_config(tmp_path, {"h": ssh_host_entry(ssh_rig, tmp_path, identity_file=str(wrong))})
    err = _connect_err(cfg)
    assert str(err).startswith("authentication failed for h (")


def test_refused_connection(ssh_rig, tmp_path):
    cfg = write_config(tmp_path, {"h": ssh_host_entry(ssh_rig, tmp_path, port=free_port())})
    assert "connection refused" in str(_connect_err(cfg))


def test_ssh_config_alias_and_gateway(ssh_rig, tmp_path):
    """An ~/.ssh/config alias resolves, and a jump host (another entry) carries the connection."""
    home = Path.home()
    (home / ".ssh").mkdir(exist_ok=True)
    (home / ".ssh" / "config").write_text(
        f"Host gpu-alias\n  HostName 127.0.0.1\n  Port {ssh_rig['sshd'].port}\n  IdentityFile {ssh_rig['client_key']}\n"
    )
    jump = ssh_host_entry(ssh_rig, tmp_path)
    via = {
        k: v
        for k, v in ssh_host_entry(ssh_rig, tmp_path).items()
        if k not in ("host", "port", "identity_file")
    }
    via["gateway"] = "jump"
    cfg = write_config(tmp_path, {"gpu-alias": via, "jump": jump})
    c = connect(cfg.hosts["gpu-alias"], cfg)
    res = c.run(["echo", "through the jump host"])
    c.close()
    assert res.ok and res.out.strip() == "through the jump host"


def test_connection_drop_mid_session_is_one_line(ssh_rig, tmp_path):
    root = tmp_path / "s2"
    root.mkdir()
    sshd = Sshd(root, ssh_rig["authorized"], host_key=ssh_rig["sshd"].host_key).start()
    try:
        cfg = write_config(tmp_path, {"h": ssh_host_entry(ssh_rig, tmp_path, port=sshd.port)})
        (tmp_path / "kh2").write_text(sshd.known_hosts_line())
        cfg = write_config(
            tmp_path,
            {
                "h": ssh_host_entry(
                    ssh_rig, tmp_path, port=sshd.port, known_hosts=str(tmp_path / "kh2")
                )
            },
        )
        c = connect(cfg.hosts["h"], cfg)
        assert c.run(["true"]).ok
        with pytest.raises(ConnectError, match="lost"):
            # kill every sshd serving our session (the child of the listener), mid-command
            c.run(["sh", "-c", "kill -9 $PPID; sleep 5"])
        c.close()
    finally:
        sshd.stop()


def test_local_connector_missing_command():
    c = connect(HostConfig(name="l", connect="local", remote_dir="/tmp"), None)
    res = c.run(["definitely-not-a-command-xyz"])
    assert res.exit_code == 127


def test_accept_new_is_said_out_loud(ssh_rig, tmp_path):
    import sys as _sys

    kh = tmp_path / "kh"
    cfg = write_config(
        tmp_path,
        {"h": ssh_host_entry(ssh_rig, tmp_path / "r", known_hosts=str(kh), host_key="accept-new")},
    )
    res = subprocess.run(
        [_sys.executable, "-m", "deploytool", "--config", str(cfg.path), "hosts"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert (
        "h: trusted a new host key (host_key: accept-new): [127.0.0.1]:" in res.stderr
        and "SHA256:" in res.stderr
    )
