"""The wiring's own rules that no host is needed for."""

from __future__ import annotations

from types import SimpleNamespace


def test_a_default_output_is_said_from_where_it_is_typed_or_whole_where_far(tmp_path, monkeypatch):
    """`report written to ../../tmp/nu23/report-sim1.html` for a hosts.yaml elsewhere."""
    from deploytool.commands import _beside_config

    proj = tmp_path / "proj"
    (proj / "docs").mkdir(parents=True)
    config = SimpleNamespace(base_dir=proj)
    monkeypatch.chdir(proj)
    assert _beside_config(config, "report-a.html") == "report-a.html"
    monkeypatch.chdir(proj / "docs")
    assert _beside_config(config, "report-a.html") == "../report-a.html"
    far = tmp_path / "else" / "where"
    far.mkdir(parents=True)
    monkeypatch.chdir(far)
    assert _beside_config(config, "report-a.html") == str(proj / "report-a.html")
