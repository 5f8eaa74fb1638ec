"""deploy's rules on the local side, with a real folder on this machine as the host: a release is
its content (the same files, the same id; pycache and other files left out), only what changed is
sent, a deploy of what the host runs sends nothing, a prompt file that is nowhere is said before
anything is sent, and a rollback goes back to the release before."""

from __future__ import annotations

import pytest

from deploytool.config import load_config
from deploytool.connectors import connect
from deploytool.errors import UsageError
from deploytool.ops import deploy
from tests.conftest import write_prompts


def project(tmp_path, *datasets: str):
    for ds in datasets:
        write_prompts(tmp_path / "data" / "prompts" / f"{ds}.jsonl", 3, ds)
    lines = "\n".join(f"    {ds}: {{prompts: data/prompts/{ds}.jsonl}}" for ds in datasets)
    (tmp_path / "hosts.yaml").write_text(
        "default_host: box\n"
        "hosts:\n  box: {connect: local, remote_dir: host}\n"
        f"job:\n  datasets:\n{lines}\n  engine: {{kind: simulate}}\n"
    )
    return load_config(tmp_path / "hosts.yaml")


def test_a_release_is_its_content(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub" / "__pycache__").mkdir(parents=True)
    (pkg / "a.py").write_text("A = 1\n")
    (pkg / "sub" / "b.json").write_text("{}")
    (pkg / "sub" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"\0")
    (pkg / "notes.md").write_text("not shipped")
    cfg = project(tmp_path / "p", "B1")
    one = deploy.build_release(cfg, pkg)
    assert sorted(one.files) == ["job.json", "remote/a.py", "remote/sub/b.json"]
    assert deploy.build_release(cfg, pkg).id == one.id  # the same content, the same id
    (pkg / "a.py").write_text("A = 2\n")
    assert deploy.build_release(cfg, pkg).id != one.id


def test_only_what_changed_is_sent_and_what_the_host_runs_sends_nothing(tmp_path):
    cfg = project(tmp_path, "B1")
    with connect(cfg.hosts["box"], cfg) as conn:
        first = deploy.deploy_host(conn, cfg)
        assert first.previous is None and "job.json" in first.added
        assert first.prompts == ["data/prompts/B1.jsonl"] and first.bytes_sent > 0
        again = deploy.deploy_host(conn, cfg)
        assert not again.changed and again.bytes_sent == 0 and again.release == first.release
        write_prompts(tmp_path / "data" / "prompts" / "B1.jsonl", 5, "B1")  # more prompts
        more = deploy.deploy_host(conn, cfg)
        assert more.prompts == ["data/prompts/B1.jsonl"] and more.release == first.release
        assert more.bytes_sent == (tmp_path / "data" / "prompts" / "B1.jsonl").stat().st_size
        assert (tmp_path / "host" / "current" / "job.json").exists()


def test_a_prompt_file_that_is_nowhere_is_said_before_anything_is_sent(tmp_path):
    cfg = project(tmp_path, "B1", "B2")
    (tmp_path / "data" / "prompts" / "B2.jsonl").unlink()
    with connect(cfg.hosts["box"], cfg) as conn, pytest.raises(UsageError) as e:
        deploy.deploy_host(conn, cfg)
    assert str(e.value).startswith(
        "job.datasets.B2.prompts: data/prompts/B2.jsonl is neither beside hosts.yaml"
    )
    assert "nothing was deployed" in str(e.value)
    assert not (tmp_path / "host" / "current").exists()


def test_a_rollback_goes_back_to_the_release_before(tmp_path):
    cfg = project(tmp_path, "B1")
    with connect(cfg.hosts["box"], cfg) as conn:
        first = deploy.deploy_host(conn, cfg)
        cfg2 = project(tmp_path, "B1", "B2")  # another job.json: another release
        second = deploy.deploy_host(conn, cfg2)
        assert second.release != first.release and second.previous == first.release
        back = deploy.rollback_host(conn)
        assert (tmp_path / "host" / "current").resolve().name == first.release
        assert back.host == "box"
