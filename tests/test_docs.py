"""The README and docs/ hold what the code does: docs/configuration.md against the config schema
(every key, each default), the front page's length and commands, links that resolve inside the
repository and nothing cited from outside it."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from deploytool import config as cfg
from deploytool.config import HostConfig, ServerSpec, TrainSpec
from deploytool.config.extras import RECOVER_FIELDS
from remote.common.jobspec import NOTIFY_DEFAULT, NOTIFY_TIMEOUT_S, DatasetSpec, EngineSpec
from remote.common.recover import RecoverSpec
from tests.conftest import REPO, piped_env
from tests.helpers.as_typed import INVOKE

DOCS = REPO / "docs"
CONFIG_PAGE = DOCS / "configuration.md"
NO_DEFAULT = "—"


def defaults_of(cls, keys) -> dict:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out = {}
    for k in keys:
        f = fields[k]
        value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        out[k] = list(value) if isinstance(value, tuple) else value
    return out


def no_defaults(keys) -> dict:
    return dict.fromkeys(keys, NO_DEFAULT)


# the page's sections, each with the keys the schema takes there and their defaults
SCHEMA = {
    "The top level": no_defaults(("default_host", "defaults", "hosts", "job", "server", "recover")),
    "`defaults` and `hosts.NAME`": defaults_of(HostConfig, cfg.HOST_FIELDS),
    "`job`": no_defaults(
        ("datasets", "engine", "sampling", "chat_template_kwargs", "extra_body", "notify", "train")
    ),
    "`job.datasets.NAME`": {
        "prompts": NO_DEFAULT,
        "eval_prompts": NO_DEFAULT,
        **defaults_of(DatasetSpec, ("est_tokens", "turns")),
    },
    "`job.engine`": defaults_of(EngineSpec, cfg.ENGINE_FIELDS),
    "`job.sampling`": no_defaults(cfg.SAMPLING_KEYS),
    "`job.notify`": {
        "command": NO_DEFAULT,
        "on": list(NOTIFY_DEFAULT),
        "timeout": NOTIFY_TIMEOUT_S,
    },
    "`job.train`": defaults_of(TrainSpec, cfg.TRAIN_FIELDS),
    "`server`": defaults_of(ServerSpec, cfg.SERVER_FIELDS),
    "`recover`": defaults_of(RecoverSpec, RECOVER_FIELDS),
}


def sections(text: str) -> dict[str, dict[str, str]]:
    """heading -> {key: the default cell} from each `| `key` | default | meaning |` table."""
    out, current = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            current = out.setdefault(line[3:].strip(), {})
        m = re.match(r"^\| `([^`]+)` \| (.*?) \| .+ \|$", line)
        if m and current is not None:
            assert m.group(1) not in current, f"{m.group(1)} twice"
            current[m.group(1)] = m.group(2)
    return out


def cell_value(cell: str):
    """A default cell: "—", or a YAML value in backticks (words after it explain it)."""
    if cell == NO_DEFAULT:
        return NO_DEFAULT
    m = re.match(r"^`([^`]*)`", cell)
    assert m, f"a default is a value in backticks or {NO_DEFAULT}: {cell!r}"
    return yaml.safe_load(m.group(1))


def test_the_configuration_page_has_every_key_with_its_default():
    page = sections(CONFIG_PAGE.read_text())
    for heading, schema in SCHEMA.items():
        assert heading in page, f"docs/configuration.md has no section ## {heading}"
        documented = page[heading]
        assert set(documented) == set(schema), (
            f"{heading}: missing {sorted(set(schema) - set(documented))}, "
            f"not in the schema {sorted(set(documented) - set(schema))}"
        )
        for key, default in schema.items():
            assert cell_value(documented[key]) == default, (
                f"{heading} {key}: the page says {documented[key]!r}, the code {default!r}"
            )


def test_the_check_fails_on_a_key_or_default_the_page_lacks(monkeypatch):
    monkeypatch.setitem(SCHEMA, "`recover`", {**SCHEMA["`recover`"], "jitter": 0.5})
    with pytest.raises(AssertionError, match=r"missing \['jitter'\]"):
        test_the_configuration_page_has_every_key_with_its_default()
    monkeypatch.setitem(SCHEMA, "`recover`", {**SCHEMA["`recover`"], "jitter": NO_DEFAULT})
    monkeypatch.setitem(SCHEMA, "`job.engine`", {**SCHEMA["`job.engine`"], "concurrency": 64})
    with pytest.raises(AssertionError):
        test_the_configuration_page_has_every_key_with_its_default()


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def test_the_readme_is_a_front_page():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 160
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh", "invoke deploy"):
        assert command in text
    assert "invoke restart --max-samples" in text and "invoke tail" in text
    for page in ("configuration", "leave-alone", "several-hosts", "training-file"):
        assert f"docs/{page}.md" in text


def test_the_readme_says_how_to_type_invoke_after_the_demo_and_what_it_says_elsewhere(tmp_path):
    """After the demo a newcomer's `invoke status` was `command not found`: the demo puts the venv's
    bin on its own PATH only, and the README never said how to."""
    text = " ".join((REPO / "README.md").read_text().split())
    assert "`. .venv/bin/activate`" in text and "`.venv/bin/invoke status`" in text
    env = {k: v for k, v in piped_env().items() if k != "DEPLOYTOOL_CONFIG"}
    elsewhere = subprocess.run(
        [INVOKE, "status"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert elsewhere.returncode != 0 and f"`{elsewhere.stderr.strip()}`" in text
    deploytool = str(Path(INVOKE).with_name("deploytool"))
    anywhere = subprocess.run(
        [deploytool, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert anywhere.returncode == 0 and "Usage: deploytool" in anywhere.stdout
    assert "`.venv/bin/deploytool" in text


def anchor(heading: str) -> str:
    """GitHub's id for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_links_resolve_inside_the_repository(page):
    text = page.read_text()
    for target in re.findall(r"\]\(([^)]+)\)", text):
        assert not re.match(r"^[a-z]+://", target), f"{page.name} cites {target}"
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: {target} is not in the repository"
        if frag and dest.suffix == ".md":
            ids = {anchor(h) for h in re.findall(r"^#+ (.+)$", dest.read_text(), re.M)}
            assert frag in ids, f"{page.name}: no heading #{frag} in {dest.name}"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_nothing_is_cited_from_outside_the_repository(page):
    text = page.read_text()
    # addresses only as examples (*.example, *.invalid) or on this machine
    for url in re.findall(r"https?://[^\s)`\"'>]+", text):
        host = re.sub(r"^https?://([^/:]+).*", r"\1", url)
        assert host.endswith((".example", ".invalid")) or host in ("127.0.0.1", "localhost"), url
    assert not re.search(r"\b[\w.-]+/[\w.-]+#\d+\b", text), "an issue of another project is cited"
    assert "SPEC" not in text


def test_the_specforge_recipe_is_where_the_real_engine_tier_reads_it():
    """tests/real_engine/trainers_read.py validates this block with SpecForge's own schema; here,
    in the everyday tier, it must at least be there and be YAML that names the file."""
    text = (DOCS / "training-file.md").read_text()
    block = re.search(r"cat > run.yaml <<'YAML'\n(.*?)\nYAML\n", text, re.S)
    assert block, "docs/training-file.md has no `cat > run.yaml <<'YAML'` block"
    run = yaml.safe_load(block.group(1))
    assert run["data"]["prompts_path"] == "train.jsonl"
    assert "specforge train -c run.yaml" in text
    assert "speculators prepare-data" in text


def test_the_readmes_smallest_hosts_yaml_is_valid():
    from deploytool.config import parse_config

    text = (REPO / "README.md").read_text()
    part = text[text.index("## One GPU host with vLLM") :]
    block = re.search(r"```yaml\n(.*?)```", part, re.S).group(1)
    config = parse_config(yaml.safe_load(block), REPO / "hosts.yaml")
    gpu = config.host("gpu1")
    assert gpu.address.endswith(".example") and config.job.engine.kind == "openai"
    assert config.job.extra_body == {"return_token_ids": True}
