"""The hidden-states stage's server: the job's own with vLLM's extraction flags added, the layers
from hosts.yaml or speculators' default from the model's config, writing into the job's folder."""

from __future__ import annotations

import json

import pytest

from remote.common.jobspec import Paths, ServerSpec, extracts, flag_value
from remote.common.stages import GENERATE, HIDDEN_STATES
from remote.common.wire import HostFault
from remote.host.processes.extraction import stage_spec


def flags(spec: ServerSpec) -> tuple[dict, dict]:
    return (
        json.loads(flag_value(spec.args, "--speculative-config")),
        json.loads(flag_value(spec.args, "--kv-transfer-config")),
    )


def test_the_stage_adds_the_extraction_flags_after_the_users_args(tmp_path):
    spec = ServerSpec(
        model="m", args=("--tensor-parallel-size", "8"), hidden_states={"layers": [1, 5]}
    )
    got = stage_spec(spec, HIDDEN_STATES, Paths(tmp_path))
    assert got.args[:2] == ("--tensor-parallel-size", "8") and extracts(got.args)
    speculative, kv = flags(got)
    assert speculative == {
        "method": "extract_hidden_states",
        "num_speculative_tokens": 1,
        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [1, 5]}},
    }
    assert kv == {
        "kv_connector": "ExampleHiddenStatesConnector",
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {
            "shared_storage_path": str(tmp_path / "data" / "hidden_states" / ".incoming")
        },
    }
    assert stage_spec(spec, GENERATE, Paths(tmp_path)) == spec  # the answers' server is as written


def test_a_connector_of_ones_own_is_named_with_its_module(tmp_path):
    hs = {"layers": [0, 1], "connector": "CpuConnector", "connector_module": "rig.cpu"}
    _, kv = flags(stage_spec(ServerSpec(hidden_states=hs), HIDDEN_STATES, Paths(tmp_path)))
    assert kv["kv_connector"] == "CpuConnector" and kv["kv_connector_module_path"] == "rig.cpu"


def test_the_users_own_extraction_flags_are_kept_as_written(tmp_path):
    own = ("--kv-transfer-config", '{"kv_connector": "Mine"}')
    spec = ServerSpec(args=own)
    assert stage_spec(spec, HIDDEN_STATES, Paths(tmp_path)).args == own


def test_the_default_layers_are_speculators_from_the_models_config(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 61}))
    speculative, _ = flags(stage_spec(ServerSpec(model=str(model)), HIDDEN_STATES, Paths(tmp_path)))
    assert speculative["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == [
        2,
        30,
        58,
        61,
    ]


def test_no_config_to_read_the_layers_from_says_where_to_set_them(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(HostFault) as e:
        stage_spec(ServerSpec(model="org/absent"), HIDDEN_STATES, Paths(tmp_path))
    assert (
        "org/absent's config.json" in str(e.value)
        and "server.hidden_states.layers" in e.value.fault.fix
    )


def test_a_draft_copy_deploy_has_not_sent_yet_says_deploy_sends_it(tmp_path):
    from remote.host.processes.extraction import draft_config

    paths = Paths(tmp_path)
    draft = {"model": "./data/draft-models/eagle", "method": "eagle3", "num_speculative_tokens": 3}
    with pytest.raises(HostFault, match="by `invoke deploy`, and is not there yet") as e:
        draft_config(ServerSpec(draft=draft), paths)
    assert "invoke deploy" in e.value.fault.fix
    (paths.draft_copies / "eagle").mkdir(parents=True)  # sent: the copy, by its path on the host
    got = draft_config(ServerSpec(draft=draft), paths)
    assert got["model"] == str(paths.draft_copies / "eagle")
