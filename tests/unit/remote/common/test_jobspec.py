"""The server's listening rules, stated once for hosts.yaml's check and the host's start: loopback
unless --host says otherwise, a key from --api-key or VLLM_API_KEY, and a server beyond loopback
without one named with the fix; the key hidden in any command line shown."""

from __future__ import annotations

import pytest

from remote.common.jobspec import ServerSpec, flag_value, is_loopback, masked_args


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
