"""Which hosts.yaml a command reads: --config, else $DEPLOYTOOL_CONFIG, else the nearest project's."""

from __future__ import annotations

from pathlib import Path

from deploytool.config.locate import CONFIG_ENV, find_config, project_config


def test_the_nearest_hosts_yaml_at_or_above_the_folder_is_the_projects(tmp_path):
    (tmp_path / "hosts.yaml").write_text("hosts: {}\n")
    deep = tmp_path / "data" / "prompts"
    deep.mkdir(parents=True)
    assert project_config(deep) == (tmp_path / "hosts.yaml").resolve()
    assert project_config(tmp_path) == (tmp_path / "hosts.yaml").resolve()
    inner = tmp_path / "data" / "hosts.yaml"
    inner.write_text("hosts: {}\n")
    assert project_config(deep) == inner.resolve()  # the nearest wins


def test_a_folder_named_hosts_yaml_is_passed_over(tmp_path):
    (tmp_path / "hosts.yaml").write_text("hosts: {}\n")
    (tmp_path / "a" / "hosts.yaml").mkdir(parents=True)
    assert project_config(tmp_path / "a") == (tmp_path / "hosts.yaml").resolve()


def test_the_flag_then_the_environment_then_the_project(tmp_path, monkeypatch):
    (tmp_path / "hosts.yaml").write_text("hosts: {}\n")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    assert find_config() == (tmp_path / "hosts.yaml").resolve()
    monkeypatch.setenv(CONFIG_ENV, "/elsewhere/env.yaml")
    assert find_config() == Path("/elsewhere/env.yaml")
    assert find_config("given.yaml") == Path("given.yaml")
