"""The draft copies on the host, through release.apply as deploy drives them: a version folder
per draft content beside the name (a link to the version in use), built beside the old one and
switched whole; a plain folder an older deploy left becomes a version; a version a deploy cut off
is never read from, and lends its whole files to the next."""

from __future__ import annotations

import os

import pytest

from remote.host import draft_copy, release
from tests.helpers.release_upload import digest, upload


def test_the_release_code_takes_its_draft_copies_from_the_one_module():
    assert release.DRAFT_COPIES == draft_copy.DRAFT_COPIES == "data/draft-models"
    assert release._draft_switch is draft_copy._draft_switch


EAGLE = "data/draft-models/eagle"


def draft_apply(root: str, content: dict[str, bytes], send: list[str], whole: bool = True):
    """An apply of the draft `content` (path -> bytes) of which `send` is uploaded."""
    files = {rel: [len(b), 1_700_000_000_000_000_000, digest(b)] for rel, b in content.items()}
    args = {"id": "r1", "files": {}, "draft": {"folder": EAGLE, "files": files, "send": send}}
    return release.apply(root, args, upload({f"draft/{r}": content[r] for r in send}, whole))


def versions(tmp_path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "data/draft-models").glob(".eagle.v-*"))


def test_a_plain_draft_folder_of_an_older_deploy_becomes_a_version_and_keeps_what_is_not_ours(
    tmp_path,
):
    """data/draft-models/eagle as an older deploy left it (a plain folder, changed in place): the
    next change is built beside it, the name becomes a link to the new version, and the old folder's
    draft files go; a hidden file of the user's in it stays, and so does a folder of the user's."""
    root, old = str(tmp_path), tmp_path / EAGLE
    (old / ".cache").mkdir(parents=True)
    (old / "a.bin").write_bytes(b"a" * 10)
    (old / "b.bin").write_bytes(b"b" * 10)
    (old / ".notes").write_text("mine")
    (old / ".cache" / "x.bin").write_text("mine too")
    (tmp_path / "data/draft-models/mine").mkdir()
    (tmp_path / "data/draft-models/mine/z.bin").write_text("by hand")
    plan = release.plan(root, {"drafts": [EAGLE]})
    assert sorted(plan["drafts"][EAGLE]) == ["a.bin", "b.bin"] and plan["drafts_pending"] == {
        EAGLE: {}
    }
    a_ino = os.stat(old / "a.bin").st_ino
    draft_apply(root, {"a.bin": b"a" * 10, "b.bin": b"B" * 12}, ["b.bin"])
    (new,) = [v for v in versions(tmp_path) if "old" not in v]
    assert os.readlink(old) == new
    assert (old / "a.bin").read_bytes() == b"a" * 10 and (old / "b.bin").read_bytes() == b"B" * 12
    assert os.stat(old / "a.bin").st_ino == a_ino  # linked from the old folder, not sent
    (left,) = [tmp_path / "data/draft-models" / v for v in versions(tmp_path) if "old" in v]
    assert sorted(p.relative_to(left).as_posix() for p in left.rglob("*")) == [
        ".cache",
        ".cache/x.bin",
        ".notes",
    ]  # the user's, kept; the draft's files gone
    assert (tmp_path / "data/draft-models/mine/z.bin").read_text() == "by hand"
    cache = release._read_json(os.path.join(root, release.DRAFT_HASHES))
    assert not [k for k in cache if k.startswith(EAGLE + "/")]


def test_a_version_cut_off_is_never_read_from_and_lends_its_whole_files_to_the_next(tmp_path):
    """A deploy cut off after one file arrived: the name still links to the old version; the plan
    says the file that arrived; the next deploy (of a draft changed again meanwhile) links it rather
    than having it sent, switches, and both the old version and the unfinished one go."""
    root = str(tmp_path)
    draft_apply(root, {"a.bin": b"a1"}, ["a.bin"])
    (v1,) = versions(tmp_path)
    with pytest.raises(ValueError, match="cut short"):
        draft_apply(root, {"a.bin": b"a2", "b.bin": b"b2"}, ["a.bin", "b.bin"], whole=False)
    assert os.readlink(tmp_path / EAGLE) == v1 and len(versions(tmp_path)) == 2
    assert sorted(p.name for p in (tmp_path / EAGLE).iterdir()) == ["a.bin"]
    assert (tmp_path / EAGLE / "a.bin").read_bytes() == b"a1"
    plan = release.plan(root, {"drafts": [EAGLE]})
    assert plan["drafts"][EAGLE]["a.bin"][2] == digest(b"a1")
    assert [f[2] for f in plan["drafts_pending"][EAGLE]["a.bin"]] == [digest(b"a2")]
    draft_apply(root, {"a.bin": b"a2", "b.bin": b"b3"}, ["b.bin"])  # a.bin: not sent again
    (v3,) = versions(tmp_path)
    assert os.readlink(tmp_path / EAGLE) == v3 and v3 != v1
    assert (tmp_path / EAGLE / "a.bin").read_bytes() == b"a2"
    assert (tmp_path / EAGLE / "b.bin").read_bytes() == b"b3"
    with pytest.raises(ValueError, match="neither sent nor on the host"):
        draft_apply(root, {"a.bin": b"a4"}, [])
    assert os.readlink(tmp_path / EAGLE) == v3


def test_a_folder_that_only_looks_like_a_version_is_never_left_over(tmp_path):
    """A deploy with nothing of the draft to send drops what a cut-off deploy left beside a name the
    tool links to, and nothing beside a name it does not (a folder of the user's)."""
    root = str(tmp_path)
    draft_apply(root, {"a.bin": b"a1"}, ["a.bin"])
    with pytest.raises(ValueError, match="cut short"):
        draft_apply(root, {"a.bin": b"a2"}, ["a.bin"], whole=False)
    mine = tmp_path / "data/draft-models" / ".foo.v-old"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    assert len(versions(tmp_path)) == 2
    release.apply(root, {"id": "r2", "files": {}}, upload({}))  # no draft sent
    assert versions(tmp_path) == [os.readlink(tmp_path / EAGLE)]
    assert (mine / "notes.txt").read_text() == "the user's"
