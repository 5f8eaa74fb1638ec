"""The server's listening rules, stated once for hosts.yaml's check and the host's start: loopback
unless --host says otherwise, a key from --api-key or VLLM_API_KEY, and a server beyond loopback
without one named with the fix; the key hidden in any command line shown. job.json: every field of
a dataset and of the engine written and read back with no key list by hand."""

from __future__ import annotations

import dataclasses
import json
import typing

import pytest

from remote.common.jobspec import (
    DatasetSpec,
    EngineSpec,
    JobSpec,
    ServerSpec,
    flag_value,
    is_loopback,
    masked_args,
)


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LOCALHOST"]
)
def test_loopback_addresses(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "gpu2", "192.168.1.9"])
def test_beyond_loopback(host):
    assert not is_loopback(host)


def test_where_it_listens_and_whether_it_asks_a_key():
    plain = ServerSpec()
    assert (plain.listen_host, plain.beyond_loopback, plain.api_key) == ("127.0.0.1", False, None)
    assert plain.exposure_problem() is None
    open_ = ServerSpec(port=8001, args=("--host", "0.0.0.0"))
    why = open_.exposure_problem()
    assert why.startswith("listens on 0.0.0.0 (--host) and asks no API key")
    assert "port 8001" in why and "server.env.VLLM_API_KEY" in why
    assert (
        ServerSpec(args=("--host=0.0.0.0",), env={"VLLM_API_KEY": "k"}).exposure_problem() is None
    )
    keyed = ServerSpec(args=("--host", "10.0.0.5", "--api-key", "s3"))
    assert keyed.api_key == "s3" and keyed.exposure_problem() is None
    assert ServerSpec(args=("--host", "0.0.0.0"), headless=True).exposure_problem() is None


def test_flag_values_and_the_key_masked():
    args = ["--api-key", "s3", "--host=h", "--api-key=t4", "--port", "1"]
    assert flag_value(args, "--host") == "h" and flag_value(args, "--api-key") == "t4"
    assert flag_value(["--host"], "--host") is None
    assert masked_args(args) == ["--api-key", "****", "--host=h", "--api-key=****", "--port", "1"]


def _other_than_default(f: dataclasses.Field, hint):
    """A value for field `f` that is not its default, from its type alone."""
    default = f.default if f.default is not dataclasses.MISSING else None
    base = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    kind = typing.get_origin(base[0]) or base[0]
    if kind is bool:
        return not default
    if kind in (int, float):
        return kind((default or 0) + 7)
    if kind is tuple:
        return ("http://127.0.0.1:9/v1",) if f.name == "base_urls" else ("x",)
    return f"{f.name}-given"


def _every_field_given(cls, **fixed):
    hints = typing.get_type_hints(cls)
    given = {f.name: _other_than_default(f, hints[f.name]) for f in dataclasses.fields(cls)}
    return cls(**dict(given, **fixed))


def test_every_field_of_a_dataset_and_the_engine_reaches_job_json_and_the_runner(tmp_path):
    """No key list by hand: a field added to either spec is in job.json and read back by the runner
    with no other edit (each field here is given a value other than its default)."""
    ds = _every_field_given(DatasetSpec, name="B1")
    engine = _every_field_given(EngineSpec)
    job = JobSpec((ds,), engine)
    (tmp_path / "job.json").write_bytes(job.file_bytes())
    read = JobSpec.load(tmp_path / "job.json")  # as the runner reads it
    assert read.datasets == (ds,) and read.engine == engine
    on_disk = json.loads((tmp_path / "job.json").read_text())
    assert set(on_disk["datasets"]["B1"]) == {f.name for f in dataclasses.fields(DatasetSpec)} - {
        "name"
    }


def test_a_dataset_with_a_field_it_cannot_be_is_a_bad_job_file(tmp_path):
    (tmp_path / "job.json").write_text('{"datasets": {"B1": {"prompts": "p", "est_tokens": "7"}}}')
    with pytest.raises(ValueError, match="DatasetSpec.est_tokens"):
        JobSpec.load(tmp_path / "job.json")
