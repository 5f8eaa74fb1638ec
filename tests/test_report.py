"""`invoke report`: one self-contained HTML page from the host's status, history and outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser

from tests.conftest import base_job, ssh_host_entry, write_config, write_prompts


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.svg_titles: list[str] = []
        self.text: list[str] = []
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs
        if tag == "svg":
            self.svg_titles.append(dict(attrs).get("aria-label", ""))

    def handle_data(self, data):
        self.text.append(data)


def test_report_is_one_self_contained_page(tmp_path, ssh_rig, openai_server):
    srv = openai_server(shape="vllm", cut_in_thinking=0.3)
    proj = tmp_path / "p"
    proj.mkdir()
    for ds in ("B1", "B2"):
        write_prompts(proj / "data" / "prompts" / f"{ds}.jsonl", 20, ds)
    host_dir = tmp_path / "host"
    spec = base_job(
        datasets={
            ds: {"prompts": f"data/prompts/{ds}.jsonl", "est_tokens": 100} for ds in ("B1", "B2")
        },
        engine={"kind": "openai", "base_url": srv.url, "model": "test-model", "concurrency": 4},
    )
    spec["sampling"]["max_tokens"] = 300
    hosts = {"gpu": ssh_host_entry(ssh_rig, host_dir), "gpu2": ssh_host_entry(ssh_rig, host_dir)}
    cfg = write_config(proj, hosts, job=spec)
    base = [sys.executable, "-m", "deploytool", "--config", str(cfg.path)]
    assert subprocess.run(base + ["deploy"], capture_output=True).returncode == 0
    assert (
        subprocess.run(base + ["restart", "--max-samples", "15"], capture_output=True).returncode
        == 0
    )
    assert subprocess.run(base + ["tail"], capture_output=True).returncode == 0
    # a day of history as the runner writes it (a line a minute, a restart half-way)
    lines = [{"t": 1_764_500_000, "start": 1}]
    lines += [
        {"t": 1_764_500_000 + 60 * i, "tps": 100.0 + i, "fl": 4, "ds": {}} for i in range(1, 720)
    ]
    lines.insert(360, {"t": 1_764_500_000 + 60 * 360, "start": 2})
    (host_dir / "run" / "history.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    res = subprocess.run(base + ["report"], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = cfg.path.parent / "report-gpu.html"  # beside hosts.yaml, said from where it was typed
    assert f"report written to {out.relative_to(tmp_path)}" in res.stdout and out.exists()
    text = out.read_text()
    page = Page()
    page.feed(text)
    assert page.tags[0] == "html" and "table" in page.tags
    assert len(page.svg_titles) == 3  # tokens/s over time + one histogram per dataset
    assert any("B1: response length" in t for t in page.svg_titles)
    assert any("B2: response length" in t for t in page.svg_titles)
    assert text.count('class="start"') == 2  # both runner starts marked
    assert "max_tokens 300" in text  # the cut-off marked on the histograms
    # nothing fetched from anywhere: no scripts, links, images, frames, no src/href, no CSS url() or @import
    assert not {"script", "link", "img", "iframe", "object", "embed"} & set(page.tags)
    assert not [a for a, _ in page.attrs if a in ("src", "href", "srcset", "xlink:href")]
    assert "url(" not in text and "@import" not in text
    words = " ".join(page.text)
    assert "length" in words and "stop" in words  # finish_reason shares, from the outputs
    assert "15" in words  # the caps table
    bad = subprocess.run(
        base + ["report", "--out", "x.html", "--host", "gpu,gpu2"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--out names one file" in bad.stderr
