"""The `local` host: the same operations as over SSH, on this machine, with the answers an SSH host
gives (exit codes, the shell's words for a missing folder or command) and files written whole."""

from __future__ import annotations

import os
import sys

import pytest

from deploytool.config import HostConfig
from deploytool.connectors.local import LocalConnector
from deploytool.errors import RemoteError

PY = sys.executable


def local(tmp_path, remote_dir="host") -> LocalConnector:
    return LocalConnector(HostConfig(name="box", connect="local", remote_dir=remote_dir), tmp_path)


def test_a_relative_remote_dir_is_beside_the_config_and_an_absolute_one_is_kept(tmp_path):
    assert local(tmp_path).remote_dir == str(tmp_path / "host")
    assert local(tmp_path, str(tmp_path / "abs")).remote_dir == str(tmp_path / "abs")


def test_run_gives_the_exit_code_both_streams_and_never_raises_on_failure(tmp_path):
    c = local(tmp_path)
    res = c.run([PY, "-c", "import sys; print('out'); print('why', file=sys.stderr); sys.exit(3)"])
    assert (res.exit_code, res.out, res.err) == (3, "out\n", "why\n")


def test_stdin_as_bytes_or_as_a_file_and_env_and_cwd(tmp_path):
    c = local(tmp_path)
    echo = [PY, "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"]
    assert c.run(echo, stdin=b"bytes in").stdout == b"bytes in"
    (tmp_path / "f").write_bytes(b"from a file")
    with open(tmp_path / "f", "rb") as f:
        assert c.run(echo, stdin=f).stdout == b"from a file"
    assert c.run(echo).stdout == b""  # no stdin: an empty one, never the test's own
    (tmp_path / "host").mkdir()
    res = c.run([PY, "-c", "import os; print(os.getcwd(), os.environ['X'])"], cwd="host",
                env={"X": "y z"})  # fmt: skip
    assert res.out.split() == [str(tmp_path / "host"), "y", "z"]


def test_python3_is_the_interpreter_deploytool_runs_in(tmp_path):
    res = local(tmp_path).run(["python3", "-c", "import sys; print(sys.executable)"])
    assert os.path.dirname(res.out.strip()) == os.path.dirname(PY)


def test_missing_folder_missing_command_and_timeout_answer_as_a_shell_would(tmp_path):
    c = local(tmp_path)
    res = c.run(["true"], cwd="nowhere")
    assert res.exit_code == 2 and "can't cd to nowhere" in res.err
    res = c.run(["no-such-command-xyz"])
    assert res.exit_code == 127 and "command not found" in res.err
    with pytest.raises(RemoteError, match="timed out after 0.2s"):
        c.run([PY, "-c", "import time; time.sleep(60)"], timeout=0.2)
    proc = c.start(["true"], cwd="nowhere")
    assert proc.finish().exit_code == 2


def test_a_started_command_is_talked_to_line_by_line(tmp_path):
    c = local(tmp_path)
    code = "import sys\nfor line in sys.stdin: print(line.strip().upper(), flush=True)"
    proc = c.start([PY, "-c", code])
    proc.write(b"one\n")
    assert proc.readline() == b"ONE\n"
    proc.write(b"two\n")
    res = proc.finish()
    assert res.ok and res.stdout == b"TWO\n"
    with pytest.raises(RemoteError, match="cannot start"):
        c.start(["/no/such/program"])


def test_files_read_in_ranges_and_a_missing_one_is_an_error(tmp_path):
    c = local(tmp_path)
    there = tmp_path / "host" / "deep" / "er" / "copy.bin"
    there.parent.mkdir(parents=True)
    there.write_bytes(bytes(range(256)) * 100)
    got = b"".join(c.read_range("host/deep/er/copy.bin", 250, 10, chunk=4))
    assert got == bytes([250, 251, 252, 253, 254, 255, 0, 1, 2, 3])
    with pytest.raises(RemoteError, match="cannot read"):
        list(c.read_range("host/none", 0, 1))
