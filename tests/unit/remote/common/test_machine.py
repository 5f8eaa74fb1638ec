"""The served model's config.json as it lies on the host: its layers, hidden size and dtype, from the
model's own folder or the Hugging Face cache (a multimodal model's from its text model's part)."""

from __future__ import annotations

import json

from remote.common import machine


def write(path, cfg: dict):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))


def test_a_models_folder_gives_its_shape(tmp_path):
    write(tmp_path / "m", {"num_hidden_layers": 36, "hidden_size": 4096, "torch_dtype": "bfloat16"})
    assert machine.model_config(str(tmp_path / "m")) == {
        "layers": 36,
        "hidden": 4096,
        "dtype_bytes": 2,
    }


def test_a_hub_name_is_read_from_the_cache_at_its_main_revision(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    repo = tmp_path / "hf" / "hub" / "models--moonshotai--Kimi-K2.5"
    write(repo / "snapshots" / "old", {"num_hidden_layers": 2, "hidden_size": 8})
    kimi = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "text_config": {"num_hidden_layers": 61, "hidden_size": 7168, "torch_dtype": "bfloat16"},
        "vision_config": {"num_hidden_layers": 27, "hidden_size": 1152},
    }
    write(repo / "snapshots" / "abc123", kimi)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123\n")
    assert machine.model_config("moonshotai/Kimi-K2.5") == {
        "layers": 61,
        "hidden": 7168,
        "dtype_bytes": 2,
    }


def test_no_config_or_a_broken_one_is_not_known(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    none = {"layers": None, "hidden": None, "dtype_bytes": None}
    assert machine.model_config("org/absent") == none
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "config.json").write_text('{"num_hidden_layers": 3')
    assert machine.model_config(str(tmp_path / "torn")) == none
    write(tmp_path / "odd", {"num_hidden_layers": True, "hidden_size": 8})
    assert machine.model_config(str(tmp_path / "odd")) == none
