"""The host side of deploy, on a folder in tmp: a release built from an upload of only what changed
(the rest hard-linked from the one before, every hash checked), `current` switched whole, prompt files
placed only where the job names them, an unsafe upload refused with nothing left, rollback."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile

import pytest

from remote.host import release


def upload(files: dict[str, bytes]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w|") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_only_what_changed_is_sent_the_rest_is_linked_and_current_switches(tmp_path):
    root = str(tmp_path)
    a, b = b"print('a')\n", b"print('b')\n"
    first = {"remote/a.py": digest(a), "remote/b.py": digest(b)}
    up = upload({"release/remote/a.py": a, "release/remote/b.py": b})
    assert release.apply(root, {"id": "r1", "files": first}, up)["current"] == "r1"
    b2 = b"print('b2')\n"
    second = {"remote/a.py": digest(a), "remote/b.py": digest(b2)}
    out = release.apply(
        root, {"id": "r2", "files": second, "base": "r1"}, upload({"release/remote/b.py": b2})
    )
    assert out == {"current": "r2", "previous": "r1", "prompts": [], "pruned": []}
    r1a, r2a = tmp_path / "releases/r1/remote/a.py", tmp_path / "releases/r2/remote/a.py"
    assert os.stat(r1a).st_ino == os.stat(r2a).st_ino  # linked, not sent again
    assert (tmp_path / "current/remote/b.py").read_bytes() == b2
    plan = release.plan(root, {})
    assert (plan["current"], plan["releases"], plan["manifest"]) == ("r2", ["r1", "r2"], second)
    assert release.rollback(root, {}) == {"current": "r1", "previous": "r2"}
    with pytest.raises(ValueError, match="release r9 is not on the host"):
        release.rollback(root, {"to": "r9"})


def test_a_corrupted_or_missing_file_and_an_unsafe_name_leave_nothing(tmp_path):
    root = str(tmp_path)
    with pytest.raises(ValueError, match="arrived corrupted"):
        release.apply(
            root, {"id": "r1", "files": {"x.py": digest(b"good")}}, upload({"release/x.py": b"bad"})
        )
    with pytest.raises(ValueError, match="neither uploaded nor in release"):
        release.apply(root, {"id": "r1", "files": {"y.py": digest(b"y")}}, upload({}))
    with pytest.raises(ValueError, match="unsafe path in upload"):
        release.apply(root, {"id": "r1", "files": {}}, upload({"release/../../etc/x": b""}))
    assert sorted(os.listdir(tmp_path / "releases")) == []  # no half-built release, no temp dir
    assert not (tmp_path / "current").exists()


def test_prompt_files_go_only_where_the_job_names_them(tmp_path):
    root = str(tmp_path)
    data = b'{"prompt": "hi"}\n'
    args = {"id": "r1", "files": {}, "prompts": ["data/prompts/B1.jsonl"]}
    out = release.apply(root, args, upload({"prompts/data/prompts/B1.jsonl": data}))
    assert out["prompts"] == ["data/prompts/B1.jsonl"]
    assert (tmp_path / "data/prompts/B1.jsonl").read_bytes() == data
    assert release.plan(root, {"prompts": ["data/prompts/B1.jsonl"]})["prompts"][
        "data/prompts/B1.jsonl"
    ]
    with pytest.raises(ValueError, match="names a prompt file the job does not"):
        release.apply(root, dict(args, id="r2"), upload({"prompts/data/other.jsonl": data}))
    assert not (tmp_path / "data/other.jsonl").exists()
