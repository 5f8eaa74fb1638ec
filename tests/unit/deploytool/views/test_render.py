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


def test_status_names_the_release_that_runs_and_the_deployed_one_when_it_differs():
    from remote.common.status import JobStatus, RunnerInfo

    st = JobStatus(state="running", host="gpu1", release="/h/releases/4ccbed604b97")
    st.current_release = "releases/e3e4372be5de"
    st.runner = RunnerInfo(alive=True, pid=4225, release="/h/releases/4ccbed604b97")
    text = printed(render.status_screen, st)
    first = text.splitlines()[0]
    assert "runs release 4ccbed604b97" in first
    assert "deployed e3e4372be5de: `invoke restart" in first
    st.runner = RunnerInfo(alive=False)  # the last runner's, after it ended
    assert "ran release 4ccbed604b97" in printed(render.status_screen, st)
    st.release = "/h/releases/e3e4372be5de"
    first = printed(render.status_screen, st).splitlines()[0]
    assert "release e3e4372be5de" in first and "deployed" not in first


def test_the_caps_table_marks_what_a_restart_changed():
    from remote.common.jobspec import Caps

    rows = {
        "B1": CapRow(4, 4, "complete", prompts=16, cap=4, was=4),
        "B2": CapRow(4, 6, "running", prompts=16, cap=6, was=4),
        "B3": CapRow(4, 0, "complete", prompts=16, cap=4, was=4, selected=False),
    }
    text = printed(lambda out: render.caps_table(rows, out, Caps(4, {"B2": 6}, 10_000), Caps(4)))
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert "→" not in lines["B1"] and "4 → 6" in lines["B2"] and "4 → not run" in lines["B3"]
    assert "max-tokens none → 10.0k" in text
    same = {"B1": CapRow(4, 4, "complete", prompts=16, cap=4, was=4)}
    assert "caps unchanged" in printed(lambda out: render.caps_table(same, out, Caps(4), Caps(4)))
