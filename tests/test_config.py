import subprocess
import sys

import pytest
import yaml

from deploytool.config import load_config
from deploytool.errors import ConfigError, ExitCode
from tests.conftest import REPO, base_job

GOOD = {
    "default_host": "local",
    "hosts": {"local": {"connect": "local", "remote_dir": ".x"}},
    "job": base_job(),
}


def write(tmp_path, data) -> str:
    p = tmp_path / "hosts.yaml"
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(p)


def with_(**changes):
    import copy

    d = copy.deepcopy(GOOD)
    for path, value in changes.items():
        cur = d
        keys = path.split("__")
        for k in keys[:-1]:
            cur = cur.setdefault(k, {})
        cur[keys[-1]] = value
    return d


def test_shipped_hosts_yaml_loads_with_eight_datasets_and_local_default():
    cfg = load_config(REPO / "hosts.yaml")
    assert cfg.default_host == "local" and cfg.hosts["local"].is_local
    assert cfg.job.dataset_names() == [f"B{i}" for i in range(1, 9)]
    est = {d.name: d.est_tokens for d in cfg.job.datasets}
    assert est["B1"] == 1577 and est["B8"] == 8000
    assert "gpu1" not in cfg.hosts  # the example GPU host ships commented out
    assert cfg.server.args == ("--tensor-parallel-size", "8", "--trust-remote-code")
    # demo runs anywhere
    assert cfg.job.engine.kind == "openai" and cfg.job_for("local").engine.kind == "simulate"


def test_per_host_job_and_server_merge_key_by_key(tmp_path):
    d = with_(
        job__engine={"kind": "simulate", "concurrency": 8, "model": "kimi"},
        job__extra_body={"return_token_ids": True},
        server={"model": "kimi", "port": 8000, "args": ["--tensor-parallel-size", "8"]},
        hosts__gpu1={
            "host": "x",
            "job": {
                "engine": {
                    "kind": "openai",
                    "base_urls": ["http://127.0.0.1:8000/v1", "http://gpu2:8000/v1"],
                },
                "sampling": {"temperature": 0.6},
                "extra_body": {"repetition_detection": {"min_count": 4}},
            },
            "server": {"headless": True, "args": ["--headless"]},
        },
    )
    cfg = load_config(write(tmp_path, d))
    assert cfg.job_for("local").engine.kind == "simulate" and cfg.job_for("local") is cfg.job
    gpu = cfg.job_for("gpu1")
    assert (
        gpu.engine.kind == "openai" and gpu.engine.concurrency == 8 and gpu.engine.model == "kimi"
    )  # inherited
    assert gpu.engine.base_urls == ("http://127.0.0.1:8000/v1", "http://gpu2:8000/v1")
    assert gpu.engine.base_url == "http://127.0.0.1:8000/v1"
    assert gpu.sampling == {"max_tokens": 8192, "temperature": 0.6}
    assert gpu.extra_body == {"return_token_ids": True, "repetition_detection": {"min_count": 4}}
    assert cfg.server_for("local").headless is False and cfg.server_for("gpu1").headless is True
    assert cfg.server_for("gpu1").args == ("--headless",) and cfg.server_for("gpu1").port == 8000
    assert gpu.to_dict()["engine"]["base_urls"] == [
        "http://127.0.0.1:8000/v1",
        "http://gpu2:8000/v1",
    ]


def test_the_runner_gets_each_servers_own_key_by_the_urls_host_and_port(tmp_path):
    d = with_(
        server={"port": 8000},
        hosts__gpu1={
            "host": "10.0.0.1",
            "server": {"env": {"VLLM_API_KEY": "k1"}},
            "job": {
                "engine": {
                    "kind": "openai",
                    "base_urls": [
                        "http://127.0.0.1:8000/v1",  # gpu1's own server
                        "http://gpu2.example:8000/v1",  # gpu2, by its address
                        "http://gpu3:9000/v1",  # gpu3, by its name, another port
                        "http://gpu4.example:8000/v1",  # nobody's key
                    ],
                }
            },
        },
        hosts__gpu2={
            "host": "gpu2.example",
            "server": {"args": ["--host", "0.0.0.0"], "env": {"VLLM_API_KEY": "k2"}},
        },
        hosts__gpu3={"host": "x", "server": {"port": 9000, "args": ["--api-key", "k3"]}},
    )
    cfg = load_config(write(tmp_path, d))
    assert cfg.server_keys("gpu1") == {
        "http://127.0.0.1:8000/v1": "k1",
        "http://gpu2.example:8000/v1": "k2",
        "http://gpu3:9000/v1": "k3",
    }
    assert cfg.server_keys("local") == {}  # the local job talks to no keyed server


def test_base_url_is_a_list_of_one(tmp_path):
    cfg = load_config(
        write(tmp_path, with_(job__engine={"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}))
    )
    assert cfg.job.engine.base_urls == ("http://127.0.0.1:9/v1",)


def test_defaults_are_inherited_and_overridden(tmp_path):
    d = with_(
        defaults={"user": "ml", "port": 2222, "python": "/opt/venv/bin/python"},
        hosts__gpu1={"host": "10.1.2.3", "port": 22},
    )
    cfg = load_config(write(tmp_path, d))
    assert cfg.hosts["gpu1"].user == "ml" and cfg.hosts["gpu1"].port == 22
    assert cfg.hosts["gpu1"].python == "/opt/venv/bin/python"
    assert cfg.hosts["gpu1"].host_key == "strict"


@pytest.mark.parametrize(
    "data, expected",
    [
        (
            with_(hosts__gpu1={"host": "x", "port": "abc"}),
            'hosts.gpu1.port: expected an integer 1-65535, got "abc"',
        ),
        (
            with_(hosts__gpu1={"host": "x", "port": 70000}),
            "hosts.gpu1.port: expected an integer 1-65535, got 70000",
        ),
        (
            with_(hosts__gpu1={"host": "x", "prot": 22}),
            "hosts.gpu1.prot: unknown key (did you mean 'port'?)",
        ),
        (
            with_(defaults={"remote_dri": "/x"}),
            "defaults.remote_dri: unknown key (did you mean 'remote_dir'?)",
        ),
        (with_(default_host="gpu9"), 'default_host: "gpu9" is not in hosts'),
        (
            with_(hosts__gpu1={"host": "x", "host_key": "yolo"}),
            "hosts.gpu1.host_key: expected one of strict, accept-new",
        ),
        (
            with_(job__engine={"kind": "tgi"}),
            'job.engine.kind: expected one of openai, simulate, got "tgi"',
        ),
        (
            with_(job__datasets={"B 1": {"prompts": "p.jsonl"}}),
            "job.datasets.B 1: dataset name must match",
        ),
        (
            with_(job__datasets={"B1": {"prompts": "/etc/passwd"}}),
            "job.datasets.B1.prompts: must be a relative path",
        ),
        (
            with_(job__engine={"concurrency": 0}),
            "job.engine.concurrency: expected an integer 1-100000, got 0",
        ),
        (
            with_(job__sampling={"max_tokens": "lots"}),
            "job.sampling.max_tokens: expected a token count",
        ),
        (
            with_(job__sampling={"temprature": 1.0}),
            "job.sampling.temprature: unknown key (did you mean 'temperature'?)",
        ),
        (with_(job__sampling={"repetition_detection": {}}), "go in job.extra_body"),
        (
            with_(job__sampling={"temperature": 7}),
            "job.sampling.temperature: expected a number at least 0 and at most 2, got 7",
        ),
        (
            with_(job__sampling={"top_p": 0}),
            "job.sampling.top_p: expected a number above 0 and at most 1, got 0",
        ),
        (
            with_(job__sampling={"top_k": 2.5}),
            "job.sampling.top_k: expected an integer at least -1",
        ),
        (with_(job__sampling={"seed": "x"}), 'job.sampling.seed: expected an integer, got "x"'),
        (with_(job__sampling={"presence_penalty": -3}), "at least -2 and at most 2, got -3"),
        (with_(job__sampling={"stop": [1]}), "job.sampling.stop: expected a string or a list"),
        (with_(job__extra_body=["x"]), "job.extra_body: expected a mapping"),
        (
            with_(job__extra_body={"max_tokens": 5}),
            "job.extra_body.max_tokens: set it in its own place",
        ),
        (
            with_(job__engine={"base_url": "http://a:1/v1", "base_urls": ["http://b:1/v1"]}),
            "job.engine: give base_url (one server) or base_urls (several), not both",
        ),
        (
            with_(job__engine={"base_urls": []}),
            "job.engine.base_urls: expected a list of one or more URLs",
        ),
        (
            with_(job__engine={"base_urls": ["gpu1:8000"]}),
            "job.engine.base_urls[0]: expected an http:// or https:// URL",
        ),
        (
            with_(job__engine={"base_urls": ["http://a/v1", "http://a/v1"]}),
            "job.engine.base_urls: http://a/v1 is listed twice",
        ),
        (
            with_(hosts__gpu1={"host": "x", "job": {"engin": {}}}),
            "hosts.gpu1.job.engin: unknown key (did you mean 'engine'?)",
        ),
        (
            with_(hosts__gpu1={"host": "x", "job": {"datasets": {}}}),
            "hosts.gpu1.job.datasets: unknown key",
        ),
        (
            with_(hosts__gpu1={"host": "x", "job": {"engine": {"kind": "tgi"}}}),
            "hosts.gpu1.job.engine.kind: expected one of",
        ),
        (
            with_(hosts__gpu1={"host": "x", "job": {"sampling": {"temprature": 1}}}),
            "hosts.gpu1.job.sampling.temprature",
        ),
        (
            with_(hosts__gpu1={"host": "x", "server": {"headles": True}}),
            "hosts.gpu1.server.headles: unknown key",
        ),
        (
            with_(hosts__gpu1={"host": "x", "jobs": {}}),
            "hosts.gpu1.jobs: unknown key (did you mean 'job'?)",
        ),
        (with_(server={"args": ["--tp", {"x": 1}]}), "server.args[1]: expected a string"),
        (
            with_(hosts__gpu1={"host": "x", "forward_agent": "yes"}),
            "hosts.gpu1.forward_agent: expected true or false",
        ),
        (dict(GOOD, jobs={}), "jobs: unknown key (did you mean 'job'?)"),
        (with_(job__train={"epoch": 2}), "job.train.epoch: unknown key (did you mean 'epochs'?)"),
        (with_(job__train={"weights": {"b1": 2}}), "job.train.weights.b1: no such dataset"),
        (with_(job__train={"weights": {"B1": 0}}), "job.train.weights.B1: expected an integer"),
        (
            with_(job__datasets={"B1": {"prompts": "p.jsonl", "turns": "every"}}),
            'job.datasets.B1.turns: expected one of last, all, got "every"',
        ),
        (  # vLLM open to the network with no key: refused before anything runs
            with_(server={"args": ["--host", "0.0.0.0"]}),
            "server: listens on 0.0.0.0 (--host) and asks no API key",
        ),
        (
            with_(hosts__gpu1={"host": "x", "server": {"args": ["--host=10.1.2.3"]}}),
            "hosts.gpu1.server: listens on 10.1.2.3 (--host) and asks no API key",
        ),
    ],
)
def test_config_errors_name_the_key(tmp_path, data, expected):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, data))
    assert expected in str(e.value)
    assert e.value.code == ExitCode.BAD_INPUT
    assert "\n" not in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")


def test_yaml_syntax_error_gives_line(tmp_path):
    p = write(tmp_path, "default_host: local\nhosts:\n  local: {connect: local\n")
    with pytest.raises(ConfigError, match=r"YAML syntax error at line \d+"):
        load_config(p)
    # an unclosed brace is found lines below: the line that opened it is said too
    p = write(
        tmp_path, "hosts:\n  local: {connect: local}\njob:\n  sampling: {temperature: 1\n  x: 1\n"
    )
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value).endswith(
        "(while parsing a flow mapping at line 4, column 13): fix the file there (an unclosed "
        "bracket or quote, a tab, an indent out of line)"
    ), e.value


def run_cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "deploytool", *args], cwd=cwd, capture_output=True, text=True
    )


def test_cli_bad_config_exits_2_with_one_line_and_no_traceback(tmp_path):
    p = write(tmp_path, with_(hosts__gpu1={"host": "x", "port": "abc"}))
    res = run_cli("--config", p, "hosts", cwd=tmp_path)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    # the file it is in, named: `recover.bogus_key: unknown key` at a deploy named none
    assert lines == [f'error: {p}: hosts.gpu1.port: expected an integer 1-65535, got "abc"']


def test_cli_unknown_host_exits_2(tmp_path):
    p = write(tmp_path, GOOD)
    res = run_cli("--config", p, "hosts", "--host", "lcoal", cwd=tmp_path)
    assert res.returncode == 2
    assert "unknown host 'lcoal' (did you mean 'local'?)" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_host_named_twice_is_one_host(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    assert [h.name for h in cfg.select_hosts("local, local")] == ["local"]


def test_host_flag_is_H_and_h_stays_help(tmp_path):
    p = write(tmp_path, GOOD)
    for ds in GOOD["job"]["datasets"].values():
        (tmp_path / ds["prompts"]).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / ds["prompts"]).write_text('{"prompt": "hi"}\n')
    res = run_cli("--config", p, "deploy", "-h", cwd=tmp_path)
    assert res.returncode == 0 and "--host=STRING" in res.stdout and "-H STRING" in res.stdout
    res = run_cli("--config", p, "deploy", "-H", "local", "--dry-run", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "local: would deploy release" in res.stdout


def test_a_key_given_twice_is_an_error_never_the_last_one_kept_silently(tmp_path):
    """A dataset pasted twice would replace another without a word (YAML keeps the last)."""
    text = yaml.safe_dump(GOOD)
    twice = text.replace(
        "  datasets:\n", "  datasets:\n    B1: {prompts: data/prompts/B3.jsonl}\n", 1
    )
    assert twice != text and twice.count("    B1:") == 2
    with pytest.raises(ConfigError, match=r"line \d+, .*B1 given twice in one mapping"):
        load_config(write(tmp_path, twice))


def test_a_token_count_at_or_below_zero_is_said_one_way(tmp_path):
    for bad in (-5, 0):
        data = with_(job__datasets={"B1": {"prompts": "data/B1.jsonl", "est_tokens": bad}})
        with pytest.raises(ConfigError) as e:
            load_config(write(tmp_path, data))
        assert str(e.value) == (
            f"{tmp_path / 'hosts.yaml'}: job.datasets.B1.est_tokens: expected a positive token "
            f"count, got {bad}"
        ), str(e.value)
