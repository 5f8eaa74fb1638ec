"""hosts.yaml's keys. One check per kind of value: each takes what YAML gives, returns the typed value,
and refuses anything else with one line that names the key, what it expected, what it got, and
the closest word where one was mistyped."""

from __future__ import annotations

import pytest

from remote.common import keys as v


def refused(check, where, value) -> str:
    with pytest.raises(v.BadValue) as e:
        check(where, value)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_numbers_take_what_yaml_gives_and_never_a_bool():
    assert v.int_in(1, 8)("w", 8) == 8
    assert (
        refused(v.int_in(1, 8), "hosts.a.port", 9) == "hosts.a.port: expected an integer 1-8, got 9"
    )
    assert refused(v.int_in(1), "k", True) == "k: expected an integer >= 1, got True"
    assert refused(v.int_in(), "k", "3") == 'k: expected an integer, got "3"'
    assert v.number(0.5)("k", 2) == 2.0 and isinstance(v.number()("k", 2), float)
    assert refused(v.number(0.5), "k", 0.1) == "k: expected a number >= 0.5, got 0.1"
    assert refused(v.number(), "k", False).endswith("got False")


def test_strings_booleans_and_choices():
    assert v.string("k", "x") == "x"
    assert refused(v.string, "k", "  ") == 'k: expected a non-empty string, got "  "'
    assert v.boolean("k", False) is False
    assert refused(v.boolean, "k", "yes") == 'k: expected true or false, got "yes"'
    pick = v.choice(("ssh", "local"))
    assert pick("connect", "local") == "local"
    assert refused(pick, "connect", "lokal") == (
        "connect: expected one of ssh, local, got \"lokal\" (did you mean 'local'?)"
    )


def test_lists_and_maps_come_out_as_strings_where_a_command_line_wants_them():
    assert v.string_list("args", ["--tp", 8, 0.5]) == ("--tp", "8", "0.5")  # YAML's unquoted 8
    assert (
        refused(v.string_list, "args", "--tp 8") == 'args: expected a list of strings, got "--tp 8"'
    )
    assert refused(v.string_list, "args", ["a", True]) == "args[1]: expected a string, got True"
    assert v.string_map("env", {"A": 1, "B": "x"}) == {"A": "1", "B": "x"}
    assert refused(v.string_map, "env", {"A": [1]}) == "env.A: expected a string, got [1]"
    assert v.mapping("m", None) == {} and v.free_map("m", {"a": [1]}) == {"a": [1]}
    assert refused(v.mapping, "m", [1]) == "m: expected a mapping, got [1]"


def test_urls_are_http_and_a_list_names_no_server_twice():
    assert v.url("u", "https://x/v1") == "https://x/v1"
    assert refused(v.url, "u", "x:8000") == 'u: expected an http:// or https:// URL, got "x:8000"'
    assert v.url_list("urls", ["http://a/v1", "http://b/v1"]) == ("http://a/v1", "http://b/v1")
    assert refused(v.url_list, "urls", []) == "urls: expected a list of one or more URLs, got []"
    assert refused(v.url_list, "urls", ["http://a/v1", "ftp://b"]).startswith("urls[1]: ")
    assert refused(v.url_list, "urls", ["http://a/v1"] * 2) == "urls: http://a/v1 is listed twice"


def test_token_counts_take_suffixes_and_must_be_positive():
    assert v.tokens("budget", "10M") == 10_000_000 and v.tokens("budget", 500) == 500
    assert refused(v.tokens, "budget", 0) == "budget: expected a positive token count, got 0"
    assert refused(v.tokens, "budget", "ten").startswith("budget: ")


def test_a_mapping_is_checked_key_by_key_and_an_unknown_key_is_named_with_the_closest():
    spec = {"port": v.int_in(1, 65535), "host": v.string}
    assert v.fields_of("hosts.gpu1", {"port": 22, "host": "h"}, spec) == {"port": 22, "host": "h"}
    assert refused(lambda w, d: v.fields_of(w, d, spec), "hosts.gpu1", {"prot": 22}) == (
        "hosts.gpu1.prot: unknown key (did you mean 'port'?)"
    )
    assert refused(lambda w, d: v.fields_of(w, d, spec), "hosts.gpu1", {"port": "22"}) == (
        'hosts.gpu1.port: expected an integer 1-65535, got "22"'
    )
    assert refused(lambda w, d: v.check_keys(w, d, spec), "", {"zzz": 1}) == "zzz: unknown key"


def test_each_key_is_declared_once_on_its_dataclass_and_a_bad_value_is_bad_input(tmp_path):
    from deploytool.config import ENGINE_FIELDS, parse_config
    from deploytool.errors import ConfigError, ExitCode
    from remote.common.jobspec import EngineSpec

    assert list(ENGINE_FIELDS) == [
        f for f in EngineSpec.__dataclass_fields__
    ]  # every key, in order
    data = {
        "hosts": {"a": {"connect": "local"}},
        "job": {"datasets": {"B1": {"prompts": "p.jsonl"}}, "engine": {"concurrency": 0}},
    }
    with pytest.raises(ConfigError) as e:  # the dataclass's check, said as any config error
        parse_config(data, tmp_path / "hosts.yaml")
    assert e.value.code == ExitCode.BAD_INPUT
    assert str(e.value) == "job.engine.concurrency: expected an integer 1-100000, got 0"


@pytest.mark.parametrize("key", ["max_samples", "cap"])
def test_a_cap_written_into_the_job_says_where_caps_are_set(key):
    from remote.common.keys import BadValue, check_keys

    with pytest.raises(BadValue) as e:
        check_keys("job.datasets.B2", {key: 5}, ("prompts", "est_tokens"))
    assert str(e.value).startswith(f"job.datasets.B2.{key}: unknown key (caps are not set in ")
    assert "`invoke restart --max-samples N`, `--cap DS=N`" in str(e.value)
