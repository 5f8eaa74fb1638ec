"""The one place remote command lines are quoted: every value reaches the command as the very
argument it was (checked by a real shell), a leading ~ stays the remote home; a command's result
read as the host-side commands write it."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from deploytool.connectors.base import Result, quote_path, read_chunks, shell_command

AWKWARD = ["plain", "two words", "it's", '"dq"', "$HOME", "`id`", "a;b", "*", "", "new\nline", "~"]


def argv_as_run(line: str) -> list[str]:
    """What a POSIX shell hands the program for this line."""
    res = subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True)
    return json.loads(res.stdout)


def test_every_argument_arrives_as_it_was_whatever_it_holds(tmp_path):
    echo = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]
    assert argv_as_run(shell_command(echo + AWKWARD)) == AWKWARD
    (tmp_path / "it's here").mkdir()
    line = shell_command(
        [
            sys.executable,
            "-c",
            "import os, json; print(json.dumps([os.getcwd(), os.environ['V']]))",
        ],
        cwd=str(tmp_path / "it's here"),
        env={"V": "$(id) `id` 'q'"},
    )
    assert argv_as_run(line) == [str(tmp_path / "it's here"), "$(id) `id` 'q'"]


def test_a_leading_tilde_is_the_remote_home_and_nothing_else_is_expanded(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    show = "import sys; print(sys.argv[1])"
    for path, want in (("~", str(tmp_path)), ("~/a b", f"{tmp_path}/a b"), ("x/~", "x/~")):
        line = f"{sys.executable} -c {quote_path(show)} {quote_path(path)}"
        out = subprocess.run(["sh", "-c", line], capture_output=True, text=True).stdout
        assert out.strip() == want
    assert quote_path("~user/x") == "'~user/x'"  # another user's home is not ours to guess


def test_an_empty_command_is_refused():
    with pytest.raises(ValueError, match="empty command"):
        shell_command([])


def test_a_result_gives_its_answer_and_the_line_that_says_why():
    res = Result(0, b'log line\n{"ok": true}\n', b"")
    assert res.ok and res.answer() == {"ok": True} and res.last_line() == '{"ok": true}'
    failed = Result(3, b"partial out\n", b"warning\nthe reason\n")
    assert not failed.ok and failed.why() == "the reason"
    assert Result(1, b"only stdout\n", b"").why() == "only stdout"
    assert Result(1, b"", b"").why("nothing said") == "nothing said"
    with pytest.raises(ValueError):
        Result(0, b"not json\n", b"").answer()
    assert Result(0, b"\xff\xfe bad utf-8", b"").out.endswith("bad utf-8")  # replaced, not raised


def test_chunks_stop_at_the_length_or_the_end_of_the_file():
    data = bytes(range(256)) * 10
    assert b"".join(read_chunks(io.BytesIO(data), 1000, 64)) == data[:1000]
    assert [len(c) for c in read_chunks(io.BytesIO(data), 130, 64)] == [64, 64, 2]
    assert b"".join(read_chunks(io.BytesIO(data[:10]), 1000, 64)) == data[:10]
    assert list(read_chunks(io.BytesIO(data), 0, 64)) == []
