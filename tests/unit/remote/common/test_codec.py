"""The one atomic write and the tolerant codec: a file seen whole or not at all, its mode, nothing
left behind; a record read back whatever release wrote it."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field

from remote.common.codec import Codec, Record, read_json, write_atomic, write_json


def test_an_atomic_write_leaves_the_whole_file_its_mode_and_no_temp(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    path = run / "supervise.json"
    path.write_text("old")
    write_atomic(path, b"new", mode=0o600)
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(run) == ["supervise.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    path = run / "kept.jsonl"
    path.write_bytes(b"old\n")

    def lines():
        yield b"half"
        raise OSError("disk full")

    try:
        write_atomic(path, lines())
    except OSError:
        pass
    assert path.read_bytes() == b"old\n" and os.listdir(run) == ["kept.jsonl"]


@dataclass
class Inner(Codec):
    n: int = 0


@dataclass
class Outer(Record):
    KEEP_NONE = True

    inner: Inner = field(default_factory=Inner)
    items: list[Inner] = field(default_factory=list)
    maybe: Inner | None = None
    rate: float = 0.0
    note: str | None = None


def test_nested_records_come_back_typed_and_a_null_is_the_default(tmp_path):
    path = tmp_path / "outer.json"
    Outer(Inner(2), [Inner(3)], None, 1.5).write(path)
    raw = json.loads(path.read_text())
    assert raw["maybe"] is None and raw["note"] is None  # KEEP_NONE: readers look keys up
    back = Outer.read(path)
    assert back == Outer(Inner(2), [Inner(3)], None, 1.5)
    path.write_text(json.dumps({"inner": None, "rate": 2, "future": 1}))
    assert Outer.read(path) == Outer(rate=2.0)  # null inner: the default; an int rate: a float
    path.write_text(json.dumps({"rate": "fast"}))
    assert Outer.read(path) is None  # a value of the wrong type: as if there were no file
    assert read_json(tmp_path / "none.json") is None
    write_json(tmp_path / "list.json", [1])
    assert read_json(tmp_path / "list.json") is None  # not an object


def test_temps_of_a_process_gone_are_swept_and_no_other_file(tmp_path):
    """A Ctrl-C of `invoke pull` cut its thread off mid-write: `..beyond.json.7054.tmp` stayed in
    the pulled folder for good, pull after pull."""
    import os
    import subprocess

    from remote.common.codec import sweep_temps

    p = subprocess.Popen(["true"])
    p.wait()
    dead = tmp_path / f"..beyond.json.{p.pid}.tmp"
    ours = tmp_path / f".B1.jsonl.{os.getpid()}.tmp"  # a write under way here
    alive = tmp_path / ".caps.json.1.tmp"  # pid 1 runs
    kept = [ours, alive, tmp_path / ".caps.json", tmp_path / "B1.jsonl", tmp_path / ".x.abc.tmp"]
    for f in (dead, *kept):
        f.write_text("x")
    assert sweep_temps(tmp_path) == 1 and not dead.exists()
    assert all(f.exists() for f in kept)
    assert sweep_temps(tmp_path / "none") == 0
