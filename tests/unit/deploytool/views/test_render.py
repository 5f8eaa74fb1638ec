"""What the local side prints for a newcomer's first commands (views and the loading line)."""

import io

from rich.console import Console

from deploytool.ops.server import log_gist
from deploytool.views import render
from remote.common.answers import CapRow


def printed(fn, *args) -> str:
    buf = io.StringIO()
    fn(*args, out=Console(file=buf, width=200, highlight=False))
    return buf.getvalue()


def test_a_cap_beyond_the_file_is_said():
    text = printed(
        render.caps_table,
        {
            "B1": CapRow(0, 32, "pending", prompts=32, cap=40),
            "B2": CapRow(5, 40, "running", prompts=90, cap=40),
            "B3": CapRow(0, 32, "pending", prompts=32, cap=None),  # no cap: every prompt
        },
    )
    lines = text.splitlines()
    assert "32*" in lines[1] and "40*" not in lines[2] and "32*" not in lines[3]
    assert lines[-1] == (
        "  * B1: fewer prompts than the cap of 40: the target is every prompt of the file"
    )


def test_no_note_when_every_cap_fits():
    text = printed(render.caps_table, {"B1": CapRow(0, 24, "pending", prompts=32, cap=24)})
    assert "*" not in text


def test_the_loading_line_quotes_vllm_without_its_prefix_and_cut_at_a_word():
    line = (
        "(EngineCore_DP0 pid=4300) INFO 12-02 00:45:31 [gpu_model_runner.py:2000] Model loading "
        "took 61.2 GiB memory and 140.5 seconds, compiling the graphs for the batch sizes it serves"
    )
    gist = log_gist(line)
    assert gist.startswith("Model loading took 61.2 GiB") and gist.endswith(" …")
    assert len(gist) <= 92 and "[gpu_model_runner" not in gist
    assert (
        log_gist("(APIServer pid=1) INFO 12-02 00:45:21 [api_server.py:1] Starting") == "Starting"
    )
    assert log_gist("a plain line [with brackets]") == "a plain line [with brackets]"
