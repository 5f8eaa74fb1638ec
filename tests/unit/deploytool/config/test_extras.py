"""hosts.yaml's `recover:`: defaults, per-host overrides, and each bad value in one line."""

from __future__ import annotations

import pytest

from deploytool.errors import ConfigError
from remote.common.recover import (
    RecoverSpec,
)
from tests.conftest import base_job, write_config


def test_recover_config_defaults_overrides_and_errors(tmp_path):
    hosts = {"local": {"connect": "local"}, "gpu1": {"host": "g", "recover": {"backoff": 1}}}
    cfg = write_config(tmp_path, hosts, job=base_job(), recover={"wedged_after": 120})
    assert cfg.recover == RecoverSpec(wedged_after=120.0)
    assert cfg.recover_for("gpu1") == RecoverSpec(wedged_after=120.0, backoff=1.0)
    off = write_config(tmp_path, hosts, job=base_job(), recover=False)
    assert off.recover_for("local").enabled is False
    assert off.recover_for("gpu1").enabled and off.recover_for("gpu1").backoff == 1.0
    for bad, key in (
        ({"max_restart": 3}, "recover.max_restart: unknown key (did you mean 'max_restarts'?)"),
        ({"wedged_after": 0}, "recover.wedged_after: expected a number >= 1"),
        ({"on_boot": "yes"}, "recover.on_boot"),
        ("soon", "recover: expected a mapping"),
    ):
        with pytest.raises(ConfigError) as e:
            write_config(tmp_path, hosts, job=base_job(), recover=bad)
        assert str(e.value).startswith(f"{tmp_path / 'hosts.yaml'}: {key}")  # the file named
