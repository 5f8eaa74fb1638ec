"""deploy / rollback over the real sshd (and the local connector for the parts that do not need SSH)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from deploytool.connectors import connect
from deploytool.errors import RemoteError
from deploytool.ops.deploy import (
    PACKAGE_DIR,
    build_release,
    deploy_host,
    release_helper,
    rollback_host,
)
from tests.conftest import free_port, outputs, ssh_host_entry, wait_for, write_config, write_prompts


@pytest.fixture
def env(tmp_path, ssh_rig):
    """A project dir (hosts.yaml, prompts, a private copy of remote/) and an SSH host dir."""
    project = tmp_path / "project"
    project.mkdir()
    write_prompts(project / "data" / "prompts" / "B1.jsonl", 20)
    pkg = project / "remote"
    shutil.copytree(PACKAGE_DIR, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    host_dir = tmp_path / "host"
    cfg = write_config(project, {"gpu": ssh_host_entry(ssh_rig, host_dir, keep_releases=3)})
    conn = connect(cfg.hosts["gpu"], cfg)
    yield {"cfg": cfg, "pkg": pkg, "host_dir": host_dir, "conn": conn, "project": project}
    conn.close()


def deploy(env, **kw):
    env["conn"].round_trips = 0
    return deploy_host(env["conn"], env["cfg"], release=build_release(env["cfg"], env["pkg"]), **kw)


def current(env) -> Path:
    return (env["host_dir"] / "current").resolve()


def test_first_deploy_then_noop_then_one_file(env):
    r1 = deploy(env)
    assert (
        r1.previous is None and "remote/job/loop/runner.py" in r1.added and "job.json" in r1.added
    )
    assert r1.prompts == ["data/prompts/B1.jsonl"]
    cur = current(env)
    assert cur.parent.name == "releases" and cur.name == r1.release
    assert (cur / "remote" / "job" / "loop" / "runner.py").read_bytes() == (
        env["pkg"] / "job" / "loop" / "runner.py"
    ).read_bytes()
    assert (env["host_dir"] / "data" / "prompts" / "B1.jsonl").read_bytes() == (
        env["project"] / "data" / "prompts" / "B1.jsonl"
    ).read_bytes()
    job = json.loads((cur / "job.json").read_text())
    assert list(job["datasets"]) == ["B1"]

    r2 = deploy(env)
    assert not r2.changed and r2.bytes_sent == 0
    assert r2.round_trips == 1  # one look at the host's manifest, nothing else

    with open(env["pkg"] / "common" / "caps.py", "a") as f:
        f.write("\n# changed\n")
    r3 = deploy(env)
    assert (
        r3.modified == ["remote/common/caps.py"]
        and not r3.added
        and not r3.removed
        and not r3.prompts
    )
    assert r3.bytes_sent == (env["pkg"] / "common" / "caps.py").stat().st_size
    assert r3.round_trips == 1  # the same session asks and sends
    new = current(env)
    assert new.name == r3.release != r1.release
    # unchanged files are shared with the old release on the host (hard links), not sent again
    assert (
        os.stat(new / "remote" / "job" / "loop" / "runner.py").st_ino
        == os.stat(cur / "remote" / "job" / "loop" / "runner.py").st_ino
    )
    assert (cur / "remote" / "common" / "caps.py").read_text() != (
        new / "remote" / "common" / "caps.py"
    ).read_text()


def test_dry_run_changes_nothing(env):
    r = deploy(env, dry_run=True)
    assert r.dry_run and r.added and r.bytes_sent > 0
    assert not (env["host_dir"] / "current").exists()
    # on a host that has the job: not a byte written, the prompts' hash cache included (a prompt
    # file touched since is hashed again, and that hash is not kept)
    deploy(env)
    prompts = env["host_dir"] / "data" / "prompts" / "B1.jsonl"
    os.utime(prompts, ns=(prompts.stat().st_atime_ns, prompts.stat().st_mtime_ns + 10**9))

    def files():
        return {
            str(p): (p.stat().st_mtime_ns, p.read_bytes())
            for p in env["host_dir"].rglob("*")
            if p.is_file() and not p.is_symlink()
        }

    before = files()
    assert deploy(env, dry_run=True).dry_run
    assert files() == before


def test_rollback_and_redeploy(env):
    r1 = deploy(env)
    (env["pkg"] / "new_module.py").write_text("X = 1\n")
    r2 = deploy(env)
    assert r2.added == ["remote/new_module.py"]
    out = rollback_host(env["conn"])
    assert (out.current, out.previous) == (r1.release, r2.release)
    assert current(env).name == r1.release
    assert not (current(env) / "remote" / "new_module.py").exists()
    # same content as r2: the release is on the host already, only the switch happens
    r3 = deploy(env)
    assert r3.release == r2.release and r3.bytes_sent == 0 and current(env).name == r2.release


def test_rollback_without_previous_is_clear(env):
    deploy(env)
    with pytest.raises(RemoteError, match="no earlier release"):
        rollback_host(env["conn"])


def test_prompt_file_replaced_atomically_and_outputs_untouched(env):
    deploy(env)
    outs = outputs(env["host_dir"])
    (outs / "B1.jsonl").write_text('{"id": "x"}\n')
    write_prompts(env["project"] / "data" / "prompts" / "B1.jsonl", 30)
    r = deploy(env)
    assert r.prompts == ["data/prompts/B1.jsonl"] and not r.added and not r.modified
    assert len((env["host_dir"] / "data" / "prompts" / "B1.jsonl").read_text().splitlines()) == 30
    assert (outs / "B1.jsonl").read_text() == '{"id": "x"}\n'
    assert not list((env["host_dir"] / "data" / "prompts").glob("*.part"))


def test_running_process_keeps_its_old_release(env):
    deploy(env)
    old = current(env)
    # a "job" running from the old release: it imports its code at start and reads a file later
    # (it reads only once the new release is in place: told so by a file, never after a sleep)
    script = (
        "import os,sys,time; sys.path.insert(0, '.'); import remote.common.caps as u; "
        "f=open('remote/common/caps.py'); open(sys.argv[1],'w').write('ready')\n"
        "while not os.path.exists(sys.argv[2]): time.sleep(0.02)\n"
        "print(f.read().count('NEW_IN_THE_NEXT_RELEASE'), hasattr(u, 'NEW'))"
    )
    flag, go = env["host_dir"] / "ready", env["host_dir"] / "deployed"
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(flag), str(go)],
        cwd=old,
        stdout=subprocess.PIPE,
        text=True,
    )
    wait_for(flag.exists, what="job started")
    with open(env["pkg"] / "common" / "caps.py", "a") as f:
        f.write("\nNEW = 'NEW_IN_THE_NEXT_RELEASE'\n")
    deploy(env)
    assert current(env) != old
    assert "NEW_IN_THE_NEXT_RELEASE" in (current(env) / "remote" / "common" / "caps.py").read_text()
    go.touch()
    out, _ = proc.communicate(timeout=60)
    assert out.split() == ["0", "False"]  # it saw its own code, never the new file
    assert "NEW_IN_THE_NEXT_RELEASE" not in (old / "remote" / "common" / "caps.py").read_text()


@pytest.mark.parametrize("who", ["runner.pid", "watcher.pid"])
def test_release_in_use_by_runner_is_never_pruned(env, who):
    first = deploy(env).release
    rec = {
        "pid": os.getpid(),
        "start_time": __import__("remote.common.procinfo").common.procinfo.start_time(os.getpid()),
        "release": str(env["host_dir"] / "releases" / first),
    }
    (env["host_dir"] / "run" / who).write_text(json.dumps(rec))
    for i in range(5):
        (env["pkg"] / "common" / "caps.py").write_text(
            (env["pkg"] / "common" / "caps.py").read_text() + f"\n# v{i}\n"
        )
        deploy(env)
    left = sorted(p.name for p in (env["host_dir"] / "releases").iterdir() if p.is_dir())
    assert first in left  # a live runner uses it (or the watcher, which restarts it from there)
    assert len(left) <= 3 + 1


def test_interrupted_upload_leaves_current_and_next_deploy_works(env):
    r1 = deploy(env)
    (env["pkg"] / "common" / "caps.py").write_text(
        (env["pkg"] / "common" / "caps.py").read_text() + "\n# v2\n"
    )
    rel = build_release(env["cfg"], env["pkg"])
    # a dropped connection: the host sees the upload stream end half-way
    with pytest.raises(RemoteError, match="apply failed"):
        release_helper(
            env["conn"],
            "apply",
            {"id": rel.id, "files": rel.manifest, "base": r1.release, "prompts": [], "keep": 3},
            stdin=b"\x00" * 700,
        )
    assert current(env).name == r1.release
    assert not [p for p in (env["host_dir"] / "releases").iterdir() if p.name.startswith(".tmp-")]
    r2 = deploy(env)
    assert current(env).name == r2.release == rel.id


def test_kill_9_of_local_deploy_mid_upload(env, tmp_path):
    r1 = deploy(env)
    big = env["project"] / "data" / "prompts" / "B1.jsonl"
    with open(big, "w") as f:  # a prompt file large enough to be mid-upload when we kill
        line = json.dumps({"prompt": "x" * 1000}) + "\n"
        for _ in range(150_000):
            f.write(line)
    cmd = [sys.executable, "-m", "deploytool", "--config", str(env["cfg"].path), "deploy"]
    proc = subprocess.Popen(
        cmd,
        cwd=env["project"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ),
    )
    wait_for(
        lambda: (
            any(p.name.startswith(".tmp-") for p in (env["host_dir"] / "releases").iterdir())
            or proc.poll() is not None
        ),
        timeout=30,
        interval=0.005,
        what="upload in progress",
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert current(env).name == r1.release
    prompts = env["host_dir"] / "data" / "prompts" / "B1.jsonl"
    assert len(prompts.read_text().splitlines()) == 20  # the old prompt file, whole
    # the host's side of the killed deploy ends once it finds its sender gone; a deploy before
    # that is refused as one under way (said, nothing changed): the next waits for its end
    from remote.common.state import lock_held

    lock = env["host_dir"] / "releases" / ".deploy.lock"
    wait_for(lambda: not lock_held(lock), what="the killed deploy's host side to end")
    r2 = deploy(env)
    assert r2.prompts == ["data/prompts/B1.jsonl"]
    assert prompts.stat().st_size == big.stat().st_size
    wait_for(
        lambda: (
            not [p for p in (env["host_dir"] / "releases").iterdir() if p.name.startswith(".tmp-")]
        ),
        what="stale temp dirs cleaned",
    )


def test_two_hosts_one_unreachable(ssh_rig, tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    write_prompts(project / "data" / "prompts" / "B1.jsonl", 5)
    cfg = write_config(
        project,
        {
            "good": ssh_host_entry(ssh_rig, tmp_path / "good"),
            "down": ssh_host_entry(ssh_rig, tmp_path / "down", port=free_port()),
            "local": {"connect": "local", "remote_dir": str(tmp_path / "loc")},
        },
    )
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "deploytool",
            "--config",
            str(cfg.path),
            "deploy",
            "-H",
            "good,down,local",
        ],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1
    assert "good: deployed release" in res.stdout and "local: deployed release" in res.stdout
    assert (
        "down: FAILED: cannot connect to down" in res.stdout and "connection refused" in res.stdout
    )
    assert "error: 1 of 3 hosts failed: down" in res.stderr
    assert (tmp_path / "good" / "current").exists() and (tmp_path / "loc" / "current").exists()


def test_local_host_deploy_and_cli_output(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    write_prompts(project / "data" / "prompts" / "B1.jsonl", 5)
    cfg = write_config(project, {"local": {"connect": "local", "remote_dir": ".deploytool/local"}})
    cmd = [sys.executable, "-m", "deploytool", "--config", str(cfg.path), "deploy"]
    first = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    # a first deploy sends every file: said by folder, not one line each
    files = len(list((project / ".deploytool" / "local" / "current").rglob("*.py")))
    assert re.search(rf"added +{files + 1} files: job.json, remote/ \({files}\)", first.stdout)
    assert (
        project / ".deploytool" / "local" / "current" / "remote" / "job" / "loop" / "runner.py"
    ).exists()
    second = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert "nothing changed" in second.stdout and "0 bytes" in second.stdout


def draft_rig(env, ssh_rig, files: dict[str, int]):
    """server.draft.model naming ./drafts/eagle beside hosts.yaml, with `files` (path -> size) of
    random bytes; its config, a connection to the host, and the copy's path there."""
    from tests.conftest import ssh_host_entry as entry
    from tests.conftest import write_config as config_of

    mine = env["project"] / "drafts" / "eagle"
    for name, n in files.items():
        (mine / name).parent.mkdir(parents=True, exist_ok=True)
        (mine / name).write_bytes(os.urandom(n))
    hosts = {"gpu": entry(ssh_rig, env["host_dir"], keep_releases=3)}
    cfg = config_of(env["project"], hosts, server={"draft": {"model": "./drafts/eagle"}})
    return (
        mine,
        cfg,
        connect(cfg.hosts["gpu"], cfg),
        env["host_dir"] / "data" / "draft-models" / "eagle",
    )


def tree(top: Path) -> dict[str, bytes]:
    """Every file under `top` (links followed), hidden ones too: path -> bytes."""
    return {
        p.relative_to(top).as_posix(): p.read_bytes() for p in sorted(top.rglob("*")) if p.is_file()
    }


def test_a_draft_folder_here_is_kept_in_step_on_the_host_only_what_changed_sent(
    env, ssh_rig, monkeypatch
):
    """server.draft.model names a folder beside hosts.yaml: deploy sends it to
    data/draft-models/<name> over SSH, never into a release; an upload that breaks keeps each file
    that arrived whole, and the next deploy sends only the rest; a file gone here goes there."""
    import deploytool.ops.deploy as deploy_mod

    sizes = {"a.bin": 5000, "b.bin": 7000, "sub/c.json": 10}
    mine, cfg, conn, copy = draft_rig(env, ssh_rig, sizes)
    real = deploy_mod.file_sha256

    def torn(path):  # b.bin reads here as another file than arrives: the host refuses it
        return "0" * 64 if Path(path).name == "b.bin" else real(path)

    try:
        release = build_release(cfg, env["pkg"])
        monkeypatch.setattr(deploy_mod, "file_sha256", torn)
        with pytest.raises(RemoteError, match="b.bin arrived corrupted"):
            deploy_host(conn, cfg, release=release)
        assert not os.path.lexists(copy)  # no copy yet: none half made
        assert not (env["host_dir"] / "current").exists()  # the release is not switched to
        monkeypatch.setattr(deploy_mod, "file_sha256", real)
        r = deploy_host(conn, cfg, release=release)
        assert r.draft.sent == ["b.bin", "sub/c.json"] and r.draft.files == 3
        assert r.draft.resumed == ["a.bin"]  # arrived whole before the break: not sent again
        assert r.draft.sent_bytes == 7010 and r.draft.size == 12010
        assert tree(copy) == tree(mine)
        assert not list(current(env).rglob("*.bin"))  # never in a release
        # unchanged: nothing sent; b.bin changed and sub/c.json gone: b.bin sent, c.json removed
        r = deploy_host(conn, cfg, release=release)
        assert not r.changed and not r.draft.changed and r.bytes_sent == 0
        (mine / "b.bin").write_bytes(os.urandom(7000))
        (mine / "sub" / "c.json").unlink()
        dry = deploy_host(conn, cfg, release=release, dry_run=True)
        assert dry.draft.sent == ["b.bin"] and dry.draft.removed == ["sub/c.json"]
        assert (copy / "sub" / "c.json").exists()  # a dry run changes nothing
        r = deploy_host(conn, cfg, release=release)
        assert r.draft.sent == ["b.bin"] and r.draft.removed == ["sub/c.json"]
        assert r.bytes_sent == 7000 and tree(copy) == tree(mine)
        versions = [p.name for p in copy.parent.iterdir() if p.name.startswith(".eagle.v-")]
        assert versions == [os.readlink(copy)]  # the old version gone, its files with it
    finally:
        conn.close()


def cut_off_at(unreadable: Path, monkeypatch, conn, cfg, release) -> None:
    """A deploy of the draft cut off midway: `unreadable` cannot be read for the upload (after
    the files before it went)."""
    import builtins

    import deploytool.ops.deploy as deploy_mod

    real_open = builtins.open

    def opened(path, *a, **kw):
        if Path(path) == unreadable:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr(deploy_mod, "open", opened, raising=False)
    with pytest.raises(PermissionError):
        deploy_host(conn, cfg, release=release)
    monkeypatch.undo()


def test_a_deploy_cut_off_midway_leaves_the_old_draft_whole_and_the_next_sends_the_rest(
    env, ssh_rig, monkeypatch
):
    """A draft deployed, then changed here (two files changed, one added, one gone) and its deploy
    cut off midway (a file unreadable here, after another arrived): the copy on the host is still the
    old version, every file of it, and a dry run writes nothing; the next deploy sends only what
    never arrived and switches to the new version whole, while a file the old one had open still
    reads as it was (a server running the old draft)."""
    sizes = {"a.bin": 5000, "b.bin": 7000, "sub/c.json": 10}
    mine, cfg, conn, copy = draft_rig(env, ssh_rig, sizes)
    try:
        release = build_release(cfg, env["pkg"])
        deploy_host(conn, cfg, release=release)
        old = tree(copy)
        assert old == tree(mine)
        (mine / "a.bin").write_bytes(os.urandom(5000))
        (mine / "b.bin").write_bytes(os.urandom(7000))
        (mine / "d.bin").write_bytes(os.urandom(3000))
        (mine / "sub" / "c.json").unlink()
        cut_off_at(mine / "b.bin", monkeypatch, conn, cfg, release)
        assert tree(copy) == old  # the old version, every file: none of the new beside them
        held = (copy / "b.bin").open("rb")  # as a server running the old draft has it
        before = tree(copy.parent)
        dry = deploy_host(conn, cfg, release=release, dry_run=True)
        assert (dry.draft.sent, dry.draft.resumed) == (["b.bin", "d.bin"], ["a.bin"])
        assert tree(copy.parent) == before  # a dry run writes nothing, its hashes included
        r = deploy_host(conn, cfg, release=release)
        assert (r.draft.sent, r.draft.resumed) == (["b.bin", "d.bin"], ["a.bin"])
        assert r.draft.removed == ["sub/c.json"] and r.bytes_sent == 7000 + 3000
        assert tree(copy) == tree(mine)  # switched: the new version, whole
        with held:
            assert held.read() == old["b.bin"]
        versions = [p.name for p in copy.parent.iterdir() if p.name.startswith(".eagle.v-")]
        assert versions == [os.readlink(copy)]  # the old version gone, and the unfinished one
        r = deploy_host(conn, cfg, release=release)
        assert not r.draft.changed and r.bytes_sent == 0
    finally:
        conn.close()


def test_a_draft_deploy_cut_off_then_taken_back_here_leaves_no_unfinished_version(
    env, ssh_rig, monkeypatch
):
    """The draft changed here, its deploy cut off midway, then the change taken back: the next
    deploy has nothing of the draft to send, and the unfinished version the cut-off one left goes."""
    mine, cfg, conn, copy = draft_rig(env, ssh_rig, {"a.bin": 5000, "b.bin": 7000})
    try:
        release = build_release(cfg, env["pkg"])
        deploy_host(conn, cfg, release=release)
        kept = {p: (mine / p).read_bytes() for p in ("a.bin", "b.bin")}
        (mine / "a.bin").write_bytes(os.urandom(5000))
        (mine / "b.bin").write_bytes(os.urandom(7000))
        cut_off_at(mine / "b.bin", monkeypatch, conn, cfg, release)
        versions = [p.name for p in copy.parent.iterdir() if p.name.startswith(".eagle.v-")]
        assert len(versions) == 2  # the one in use, and the unfinished one
        for name, data in kept.items():
            (mine / name).write_bytes(data)
        r = deploy_host(conn, cfg, release=release)
        assert not r.draft.changed and r.bytes_sent == 0
        versions = [p.name for p in copy.parent.iterdir() if p.name.startswith(".eagle.v-")]
        assert versions == [os.readlink(copy)] and tree(copy) == tree(mine)
    finally:
        conn.close()
