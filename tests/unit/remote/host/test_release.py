"""The host side of deploy, on a folder in tmp: a release built from an upload of only what changed
(the rest hard-linked from the one before, every hash checked), `current` switched whole, prompt files
placed only where the job names them, an unsafe upload refused with nothing left, rollback."""

from __future__ import annotations

import os

import pytest

from remote.host import release
from tests.helpers.release_upload import digest, upload


def test_an_upload_cut_short_switches_nothing_and_keeps_nothing(tmp_path):
    """The laptop stops mid-upload (a prompt file it could not read): what the host got is a
    smaller whole tar, never to be taken for all of it."""
    from remote.common import jobspec

    assert (release.UPLOAD_END, release.DRAFT_COPIES, release.ABORT) == (
        jobspec.UPLOAD_END,
        jobspec.DRAFT_COPIES,
        jobspec.DEPLOY_ABORT,
    )  # said as text there (it is sent as standalone source): held equal here
    root = str(tmp_path)
    a = b"print('a')\n"
    release.apply(
        root, {"id": "r1", "files": {"remote/a.py": digest(a)}}, upload({"release/remote/a.py": a})
    )
    a2 = b"print('a2')\n"
    args = {"id": "r2", "files": {"remote/a.py": digest(a2)}, "base": "r1"}
    args["prompts"] = ["data/prompts/B1.jsonl"]
    cut = upload({"release/remote/a.py": a2}, whole=False)  # the prompt file never came
    with pytest.raises(ValueError, match="the upload was cut short: nothing was switched"):
        release.apply(root, args, cut)
    assert os.readlink(tmp_path / "current").endswith("r1")
    assert not (tmp_path / "releases" / "r2").exists()
    assert not (tmp_path / "data/prompts/B1.jsonl").exists()
    assert not [p for p in (tmp_path / "releases").iterdir() if p.name.startswith(".tmp")]


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
    out = release.rollback(root, {})
    assert (out["current"], out["previous"], out["why"]) == ("r1", "r2", "deployed")  # none ran
    with pytest.raises(release.BadRelease, match="no release 'r9' on the host; its releases: r1 "):
        release.rollback(root, {"to": "r9"})


def deployed(root: str, rid: str) -> None:
    release.apply(root, {"id": rid, "files": {}}, upload({}))


def test_rollback_goes_back_along_what_ran_and_takes_a_unique_prefix(tmp_path):
    root = str(tmp_path)
    for rid in ("aa1", "bb2", "cc3"):
        deployed(root, rid)
    back = [release.rollback(root, {})["current"] for _ in range(2)]
    assert back == ["bb2", "aa1"]  # a second rollback goes further back, not forth again
    with pytest.raises(ValueError, match="no earlier release") as e:
        release.rollback(root, {})
    # the way on: --to reaches every release there (it said only to deploy from a commit)
    assert "`invoke rollback --to ID` goes to any release on the host" in str(e.value)
    deployed(root, "dd4")  # deployed while aa1 ran: a rollback goes to aa1, what ran before it
    assert release.rollback(root, {})["current"] == "aa1"
    assert release.rollback(root, {"to": "cc"})["current"] == "cc3"
    deployed(root, "cc9")
    with pytest.raises(release.BadRelease, match="'cc' names 2 releases: cc3, cc9"):
        release.rollback(root, {"to": "cc"})
    assert release.main(["rollback", root, '{"to": "zz"}']) == 2  # bad input, as the CLI says it


def test_an_older_history_without_links_still_goes_back_one(tmp_path):
    root = str(tmp_path)
    for rid in ("r1", "r2"):
        deployed(root, rid)
    hist = tmp_path / "releases" / release.HISTORY
    hist.write_text('[{"id": "r1", "time": 1.0}, {"id": "r2", "time": 2.0}]')
    assert release.rollback(root, {})["current"] == "r1"


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
    left = sorted(os.listdir(tmp_path / "releases"))
    assert left in ([], [release.LOCK])  # no half-built release, no temp dir (the lock: its own)
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


def test_the_plan_says_what_the_records_of_each_dataset_were_made_with(tmp_path):
    """Deploy compares the job's settings with these: a dataset with records (a torn line alone is
    none) or, for the live runner, answers in flight."""
    outputs = tmp_path / "data" / "outputs"
    outputs.mkdir(parents=True)
    for name, lines in (("B1", '{"id": "a"}\n'), ("B2", '{"id": "a", "to'), ("B3", None)):
        (outputs / f"{name}.meta.json").write_text('{"sampling": {"temperature": 1.0}}')
        if lines is not None:
            (outputs / f"{name}.jsonl").write_text(lines)
    plan = release.plan(str(tmp_path), {"datasets": ["B1", "B2", "B3", "B4"]})
    assert plan["made_with"] == {"B1": {"sampling": {"temperature": 1.0}}}
    # the live runner has answers in flight for B3, taken with a --force of temperature 0.7 and
    # none made yet: its stop's grace writes them with 0.7 (rollback named B1 alone, and the
    # restart after it refused B1 and B3)
    import json
    import os

    from remote.common import procinfo

    (outputs / "B3.meta.json").write_text(
        json.dumps(
            {"sampling": {"temperature": 1.0}, "accepted": {"sampling": {"temperature": 0.7}}}
        )
    )
    me = os.getpid()  # stands in for the runner
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "runner.pid").write_text(
        json.dumps({"pid": me, "start_time": procinfo.start_time(me), "token": "t"})
    )
    (tmp_path / "run" / "status.json").write_text(
        json.dumps({"pid": me, "datasets": {"B3": {"in_flight": 2}}})
    )
    plan = release.plan(str(tmp_path), {"datasets": ["B1", "B2", "B3", "B4"]})
    assert plan["made_with"]["B3"] == {"sampling": {"temperature": 0.7}}


def ran(root: str, rid: str) -> None:
    """A runner got past its checks in release `rid` (as the runner notes it)."""
    from pathlib import Path

    from remote.common.jobspec import Paths
    from remote.common.state import note_ran

    paths = Paths(Path(root))
    paths.ensure()
    note_ran(paths, Path(root) / "releases" / rid)


def test_rollback_goes_to_the_last_release_a_runner_ran_from_not_one_never_run(tmp_path):
    root = str(tmp_path)
    deployed(root, "aa1")
    ran(root, "aa1")
    deployed(root, "bb2")
    ran(root, "bb2")
    ran(root, "bb2")  # the watcher's restart: no new line
    assert (tmp_path / "run" / "ran.jsonl").read_text().count("\n") == 2
    deployed(root, "cc3")  # refused at its restart: never ran
    deployed(root, "dd4")
    out = release.rollback(root, {})
    assert (out["current"], out["why"], out["previous_ran"]) == ("bb2", "ran", False)
    out = release.rollback(root, {})  # one further back along what ran, not forth to dd4
    assert (out["current"], out["previous_ran"]) == ("aa1", True)
    with pytest.raises(ValueError, match="no earlier release"):
        release.rollback(root, {})
    assert release.rollback(root, {"to": "dd"})["why"] == "named"


def test_a_second_rollback_never_goes_forth_to_a_release_that_ran_after(tmp_path):
    """A release deployed again is the same id with a newer history entry: once what ran is walked
    back to its start, the release deployed before that entry may be one that ran later."""
    root = str(tmp_path)
    deployed(root, "aa1")  # temperature 1.0
    ran(root, "aa1")
    deployed(root, "bb2")  # 0.7: refused at its restart
    deployed(root, "aa1")  # 1.0 deployed back: the same release
    deployed(root, "bb2")  # 0.7 again, restarted with --force
    ran(root, "bb2")
    assert release.rollback(root, {})["current"] == "aa1"  # what ran before
    with pytest.raises(ValueError, match="no earlier release"):  # bb2 is later, not earlier
        release.rollback(root, {})


def test_a_second_rollback_never_goes_back_to_the_release_the_first_left(tmp_path):
    """A new user: 4cc ran, 8dd ran, fc0 ran, then 8dd deployed again (its settings restored).
    rollback went to fc0, and the next rollback back to 8dd (it ran before fc0), the release just
    left, whose settings the records refused; only a third reached 4cc."""
    root = str(tmp_path)
    for rid in ("4cc", "8dd", "fc0"):
        deployed(root, rid)
        ran(root, rid)
    deployed(root, "8dd")
    assert release.rollback(root, {})["current"] == "fc0"
    assert release.rollback(root, {})["current"] == "4cc"  # one further back, past 8dd
    with pytest.raises(ValueError, match="8dd, fc0, left by the rollbacks before this one, passed"):
        release.rollback(root, {})  # nothing before 4cc: said with what it passed over
    deployed(root, "8dd")  # a deploy ends the chain: the last that ran, as ever
    assert release.rollback(root, {})["current"] == "fc0"


def test_a_rollback_from_a_release_that_ran_never_falls_back_to_one_never_run(tmp_path):
    """2d5 ran; fd3 (an edit the records refuse) was deployed, never ran; 2d5 deployed again. A
    rollback went to fd3, `the release deployed before it`: a working job could no longer start."""
    root = str(tmp_path)
    deployed(root, "2d5")
    ran(root, "2d5")
    deployed(root, "fd3")
    deployed(root, "2d5")
    with pytest.raises(ValueError, match=r"before 2d5 \(a runner ran from it\): fd3, deployed "):
        release.rollback(root, {})
    assert release._current_id(root) == "2d5"  # nothing moved
    assert release.rollback(root, {"to": "fd3"})["current"] == "fd3"  # named: the user's choice


def test_rollback_says_what_the_two_jobs_differ_in_and_knows_a_runner_older_than_its_notes(
    tmp_path,
):
    root = str(tmp_path)
    jobs = {}
    for rid, temp in (("aa1", 1.0), ("bb2", 0.7)):
        job = b'{"sampling": {"temperature": %s}}' % str(temp).encode()
        release.apply(
            root, {"id": rid, "files": {"job.json": digest(job)}}, upload({"release/job.json": job})
        )
        jobs[rid] = {"sampling": {"temperature": temp}}
    run = tmp_path / "run"  # aa1's runner, of a release that wrote no ran.jsonl
    (run / "runner.pid").write_text(f'{{"pid": 7, "release": "{tmp_path}/releases/aa1"}}')
    (run / "status.json").write_text('{"pid": 7, "state": "running"}')
    deployed(root, "cc3")
    out = release.rollback(root, {})
    assert out["current"] == "aa1" and out["why"] == "ran"
    assert (out["job"], out["previous_job"]) == (jobs["aa1"], {})


def test_a_second_deploy_or_rollback_while_one_is_under_way_changes_nothing_and_says_so(tmp_path):
    """Two terminals deploying to one host at once could each prune or drop what the other
    switches to: the second is refused in one line, its files untouched, until the first ends."""
    import fcntl
    import subprocess
    import sys

    root = str(tmp_path)
    for rid, text in (("r1", b"1"), ("r2", b"2")):
        files = {"remote/a.py": digest(text)}
        release.apply(root, {"id": rid, "files": files}, upload({"release/remote/a.py": text}))
    from deploytool.ops.deploy import _RELEASE_SRC  # as deploy sends it

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-S", "-c", _RELEASE_SRC, *args],
            capture_output=True,
            text=True,
            input="",
        )

    fd = os.open(f"{root}/releases/.deploy.lock", os.O_RDWR)  # a deploy under way elsewhere
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for args in (("rollback", root, "{}"), ("session", root)):
            res = run(*args)
            assert res.returncode == 1 and res.stdout == "", res
            assert res.stderr.startswith("error: another deploy or rollback to this host is under")
            assert os.readlink(tmp_path / "current").endswith("r2")
    finally:
        os.close(fd)
    res = run("rollback", root, "{}")  # it has ended: the rollback goes ahead
    assert res.returncode == 0, res.stderr
    assert os.readlink(tmp_path / "current").endswith("r1")


def test_a_deploy_prunes_releases_that_never_ran_before_those_that_ran(tmp_path):
    """Two releases ran, then four were deployed that never ran (settings refused, say): keeping
    three, deploy dropped the two that ran and kept the ones that never did, and the next
    rollback found no earlier release."""
    root = str(tmp_path)
    for rid in ("ran1", "ran2"):
        deployed(root, rid)
        ran(root, rid)
    for rid in ("new1", "new2", "new3", "new4"):
        release.apply(root, {"id": rid, "files": {}, "keep": 3}, upload({}))
    left = sorted(p.name for p in (tmp_path / "releases").iterdir() if not p.name.startswith("."))
    assert "ran1" in left and "ran2" in left and "new4" in left, left
    assert release.rollback(root, {})["current"] == "ran2"


def test_a_deploy_or_rollback_while_a_restart_holds_the_job_changes_nothing(tmp_path):
    """`restart --force` in its stop's grace, then `rollback`: said done, while the restart started
    the release it left (its own), whose records then mixed the settings. Refused while a restart
    holds the job; one killed midway (the lock let go) refuses nothing."""
    from pathlib import Path

    from remote.common.jobspec import Paths
    from remote.host.facts import intent

    assert release.RESTARTING == intent.RESTARTING  # said as text there (standalone source)
    root = str(tmp_path)
    deployed(root, "aa1")
    deployed(root, "bb2")
    paths = Paths(Path(root))
    with intent.locked(paths):
        intent.change(paths, runner={"wanted": False, "why": intent.RESTARTING})
        before = sorted(p.name for p in (tmp_path / "releases").iterdir())
        for act in (lambda: release.rollback(root, {}), lambda: deployed(root, "cc3")):
            with pytest.raises(ValueError, match="a restart on this host is stopping the runner"):
                act()
        assert os.readlink(tmp_path / "current").endswith("bb2")
        assert sorted(p.name for p in (tmp_path / "releases").iterdir()) == before
    assert release.rollback(root, {})["current"] == "aa1"  # the restart gone: as before
