"""The vLLM flags a stage adds to the job's own server (hosts.yaml `server:`): the hidden-states
stage's extraction config (the layers to keep, the connector that writes each request's file into the
job's own folder), the draft stage's speculative config (the draft named in `server.draft`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ...common.jobspec import Paths, ServerSpec, draft_folder, extracts, flag_value
from ...common.machine import default_layers
from ...common.stages import EXTRACT, SPECULATE, stage_of
from ...common.wire import HostFault

CONNECTOR = "ExampleHiddenStatesConnector"  # vLLM's own: one safetensors file per request


def stage_spec(spec: ServerSpec, stage: str, paths: Paths) -> ServerSpec:
    """The server `stage` needs: the hidden-states stage's is `spec` with the extraction flags added,
    the draft stage's with its draft's speculative config (unless its args give one: the user's own
    config is kept as written); the answers' is `spec`."""
    need = stage_of(stage).server
    if need == SPECULATE and flag_value(spec.args, "--speculative-config") is None:
        args = ("--speculative-config", json.dumps(draft_config(spec, paths)))
        return dataclasses.replace(spec, args=(*spec.args, *args))
    if need != EXTRACT or extracts(spec.args):
        return spec
    hs = spec.hidden_states
    layers = list(hs.get("layers") or default_layers(spec.model))
    speculative = {
        "method": "extract_hidden_states",
        "num_speculative_tokens": 1,
        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": layers}},
    }
    kv = {
        "kv_connector": hs.get("connector") or CONNECTOR,
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": str(paths.hidden_incoming)},
    }
    if hs.get("connector_module"):
        kv["kv_connector_module_path"] = hs["connector_module"]
    args = (*spec.args, "--speculative-config", json.dumps(speculative))
    args += ("--kv-transfer-config", json.dumps(kv))
    return dataclasses.replace(spec, args=args)


def draft_config(spec: ServerSpec, paths: Paths) -> dict:
    """The speculative config of the draft hosts.yaml names."""
    d = spec.draft
    if not d:
        raise HostFault(
            "server",
            "the draft stage measures a draft, and hosts.yaml names none",
            fix="set server.draft.model (a folder on the host or a model id) in hosts.yaml, "
            "then deploy",
        )
    model = str(d["model"])
    folder = draft_folder(model, paths.root)  # a folder, as the server (in remote_dir) sees it
    if folder is not None:
        if not folder.is_dir():  # vLLM would take it for a model id to download, after the target
            raise _no_folder(model, folder, paths)
        model = str(folder)
    return {
        "method": d["method"],
        "model": model,
        "num_speculative_tokens": d["num_speculative_tokens"],
    }


def _no_folder(model: str, folder: Path, paths: Paths) -> HostFault:
    """A draft folder that is not on the host. One `invoke deploy` puts there (a folder of the
    deploying machine) and that is not there yet: deploy sends it; the trained one, the train
    stage makes."""
    if folder == paths.trained_draft:
        return HostFault(
            "bad_config",
            "server.draft.model: trained names the train stage's draft, and no training has "
            f"ended on this host yet ({folder} is not there)",
            fix="`invoke restart --stage train` trains it (job.train in hosts.yaml)",
        )
    if folder.parent == paths.draft_copies:
        return HostFault(
            "bad_config",
            f"server.draft.model: the draft folder hosts.yaml names goes to {folder} on this host "
            "by `invoke deploy`, and is not there yet",
            fix="`invoke deploy` sends it, then restart again",
        )
    return HostFault(
        "bad_config",
        f"server.draft.model {model}: no such folder on this host",
        fix="copy the draft there, put it on the machine you deploy from (`invoke deploy` sends "
        "a folder hosts.yaml names that is there), or name a model id (org/name)",
    )
