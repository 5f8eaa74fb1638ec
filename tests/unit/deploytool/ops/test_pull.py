"""pull's file rules against a real folder on this machine (the `local` connector): an append-only
file gets only its new whole lines, a rewritten file is fetched whole unless it is the same, a local
copy that is no prefix of the host's is refused (or fetched again when asked), and a tail torn by a
killed pull is cut back to its last line. The host's answer is made by the host's own code."""

from __future__ import annotations

from pathlib import Path

from deploytool.config import HostConfig
from deploytool.connectors.local import LocalConnector
from deploytool.ops import pull
from remote.common.answers import FileInfo
from remote.common.jobspec import Paths
from remote.common.records import output_files


def host_and_here(tmp_path):
    conn = LocalConnector(HostConfig(name="box", connect="local", remote_dir="host"), tmp_path)
    outputs = Paths(Path(conn.remote_dir)).outputs
    outputs.mkdir(parents=True)
    here = tmp_path / "pulled" / "box"
    here.mkdir(parents=True)
    return conn, outputs, here


def once(conn, outputs, here, refetch=False) -> dict:
    have = {p.name: p.stat().st_size for p in here.iterdir()}
    found = output_files(Paths(Path(conn.remote_dir)), have, whole=refetch)  # as pull asks
    info = {n: FileInfo(**e) for n, e in found.items()}
    result = pull.PullResult("box", str(here))
    pull.sync(conn, info, have, str(outputs), here, refetch, result)
    return {name: (p.action, p.bytes) for name, p in result.files.items()}


def test_new_lines_are_appended_and_rewritten_files_fetched_when_they_changed(tmp_path):
    conn, outputs, here = host_and_here(tmp_path)
    (outputs / "B1.jsonl").write_bytes(b'{"id": 1}\n')
    (outputs / "B1.meta.json").write_bytes(b'{"model": "a"}')
    assert once(conn, outputs, here) == {
        "B1.jsonl": ("fetched", 10),
        "B1.meta.json": ("fetched", 14),
    }
    with open(outputs / "B1.jsonl", "ab") as f:
        f.write(b'{"id": 2}\n{"id": 3, "half')  # the host is mid-write: its last line not whole
    got = once(conn, outputs, here)
    assert got["B1.jsonl"][0] == "appended" and got["B1.meta.json"] == ("unchanged", 0)
    assert (here / "B1.jsonl").read_bytes() == b'{"id": 1}\n{"id": 2}\n'  # whole lines only
    (outputs / "B1.meta.json").write_bytes(b'{"model": "b"}')  # the same size, rewritten
    assert once(conn, outputs, here)["B1.meta.json"] == ("fetched", 14)
    assert (here / "B1.meta.json").read_bytes() == b'{"model": "b"}'


def test_a_copy_that_is_no_prefix_of_the_hosts_is_refused_unless_fetched_again(tmp_path):
    conn, outputs, here = host_and_here(tmp_path)
    (outputs / "B1.jsonl").write_bytes(b'{"id": 1}\n{"id": 2}\n')
    (here / "B1.jsonl").write_bytes(b'{"id": 9}\n')  # not what the host has
    got = once(conn, outputs, here)
    assert got["B1.jsonl"] == ("refused: local copy is not a prefix of the host's file", 0)
    assert (here / "B1.jsonl").read_bytes() == b'{"id": 9}\n'  # left as it was
    assert once(conn, outputs, here, refetch=True)["B1.jsonl"][0] == "re-fetched"
    assert (here / "B1.jsonl").read_bytes() == (outputs / "B1.jsonl").read_bytes()


def test_refetch_finds_a_copy_changed_in_place_far_from_its_end(tmp_path):
    """A byte changed at the start of a copy of 200 KiB, its length the same: the last block's hash
    cannot see it; --refetch compares every byte and fetches it again."""
    conn, outputs, here = host_and_here(tmp_path)
    lines = b"".join(b'{"id": %d, "pad": "%s"}\n' % (i, b"x" * 100) for i in range(2000))
    (outputs / "B1.jsonl").write_bytes(lines)
    once(conn, outputs, here)
    (here / "B1.jsonl").write_bytes(b'{"id": 7' + lines[8:])  # was 0
    assert once(conn, outputs, here)["B1.jsonl"][0] == "unchanged"  # a plain pull: no cost to see
    assert once(conn, outputs, here, refetch=True)["B1.jsonl"][0] == "re-fetched"
    assert (here / "B1.jsonl").read_bytes() == lines


def test_a_tail_torn_by_a_killed_pull_is_cut_back_to_its_last_line(tmp_path):
    torn = tmp_path / "B1.jsonl"
    torn.write_bytes(b'{"id": 1}\n{"id": 2, "te')
    pull._cut_torn_tail(torn)
    assert torn.read_bytes() == b'{"id": 1}\n'
    pull._cut_torn_tail(torn)  # a whole file is left alone
    assert torn.read_bytes() == b'{"id": 1}\n'
    torn.write_bytes(b"no newline at all")
    pull._cut_torn_tail(torn)
    assert torn.read_bytes() == b""
