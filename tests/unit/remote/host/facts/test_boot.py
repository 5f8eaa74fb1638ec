"""recover.on_boot's systemd unit, and why not without systemd."""

from __future__ import annotations


def test_on_boot_unit_and_why_not_without_systemd(tmp_path, monkeypatch):
    from remote.common.jobspec import Paths
    from remote.host.facts import boot

    paths = Paths(tmp_path / "eagle3-train")
    text = boot.unit_text(paths, "/opt/venv/bin/python")
    assert f"ExecStart=/opt/venv/bin/python -m remote watch --root {paths.root}\n" in text
    assert f"WorkingDirectory={paths.root}/current" in text and "[Install]" in text
    monkeypatch.setattr(boot, "systemd_running", lambda: False)
    assert boot.install(paths, "/opt/venv/bin/python") == boot.NO_SYSTEMD
    assert "does not run systemd" in boot.NO_SYSTEMD and not boot.installed(paths)
