"""The one rule for every path a command writes (--out, --to, --pulled): its folder exists and takes
new entries, a file is not a folder nor a folder a file, and an empty value is no path; each refusal
is a UsageError (exit 2) that names the flag and the path, and nothing is left behind."""

from __future__ import annotations

import os

import pytest

from deploytool.errors import ExitCode, UsageError
from deploytool.ops.out_paths import folder_to_read, writable


def refused(path, flag="--out", **kw) -> str:
    with pytest.raises(UsageError) as e:
        writable(path, flag, **kw)
    assert e.value.code == ExitCode.BAD_INPUT
    return str(e.value)


def test_a_path_in_a_folder_that_exists_is_given_back_and_leaves_nothing(tmp_path):
    d = tmp_path / "here"
    d.mkdir()
    assert writable(d / "r.html", "--out") == d / "r.html"
    assert writable(d / "pulled", "--to", folder=True) == d / "pulled"
    assert writable(d, "--to", folder=True) == d  # an existing folder, too
    assert os.listdir(d) == []  # the probe is gone, and no folder was made


def test_a_missing_folder_is_named_and_never_made(tmp_path):
    out = tmp_path / "no" / "dir" / "x.jsonl"
    assert refused(out) == f"--out {out}: the folder {out.parent} does not exist (make it first)"
    assert refused(out, "--to", folder=True).startswith(f"--to {out}: the folder {out.parent} ")
    assert not (tmp_path / "no").exists()
    (tmp_path / "f").write_text("")
    assert (
        refused(tmp_path / "f" / "x")
        == f"--out {tmp_path / 'f' / 'x'}: {tmp_path / 'f'} is a file, not a folder"
    )


def test_a_file_is_not_a_folder_nor_a_folder_a_file(tmp_path):
    (tmp_path / "f").write_text("")
    assert refused(tmp_path) == f"--out {tmp_path}: {tmp_path} is a folder: name the file to write"
    f = tmp_path / "f"
    assert refused(f, "--to", folder=True) == f"--to {f}: {f} is a file, not a folder"


def test_a_folder_that_takes_no_new_entry_and_an_empty_value(tmp_path):
    assert refused("/proc/nope", "--to", folder=True).startswith(
        "--to /proc/nope: cannot write in /proc"
    )
    assert refused("", "--out") == "--out: needs a path, got ''"


def test_a_folder_only_read_is_named_with_the_fix_where_missing_and_said_a_file_where_one(tmp_path):
    assert folder_to_read(tmp_path, "--pulled", "pull first") == tmp_path
    for path, why in (
        (tmp_path / "gone", "no such folder: pull first"),
        (tmp_path / "f", f"{tmp_path / 'f'} is a file, not a folder"),
        ("", None),
    ):
        if path == tmp_path / "f":
            path.write_text("")
        with pytest.raises(UsageError) as e:
            folder_to_read(path, "--pulled", "pull first")
        assert e.value.code == ExitCode.BAD_INPUT
        assert str(e.value) == (
            f"--pulled {path}: {why}" if why else "--pulled: needs a path, got ''"
        )
