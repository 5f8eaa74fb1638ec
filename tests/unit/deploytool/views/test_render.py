"""What the local side prints for a newcomer's first commands (views and the loading line)."""

import io

from rich.console import Console

from deploytool.ops.server import log_gist
from deploytool.views import render


def printed(fn, *args) -> str:
    buf = io.StringIO()
    fn(*args, out=Console(file=buf, width=200, highlight=False))
    return buf.getvalue()


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
    from remote.common.status import JobView, RunnerInfo

    st = JobView(state="running", host="gpu1", release="/h/releases/4ccbed604b97")
    st.current_release = "releases/e3e4372be5de"
    st.runner = RunnerInfo(alive=True, pid=4225, release="/h/releases/4ccbed604b97")
    text = printed(render.status_screen, st)
    first = text.splitlines()[0]
    assert "runs release 4ccbed604b97" in first
    assert "deployed e3e4372be5de: `invoke restart" in first
    # a restart under way (its stop): it starts the deployed release; no restart to type again
    from remote.common.status import Supervision

    st.stopping, st.supervision = 30.0, Supervision(restarting=True)
    first = printed(render.status_screen, st).splitlines()[0]
    assert "deployed e3e4372be5de: the restart under way starts it" in first, first
    assert "invoke restart" not in first
    st.stopping, st.supervision = None, None
    st.runner = RunnerInfo(alive=False)  # the last runner's, after it ended
    assert "ran release 4ccbed604b97" in printed(render.status_screen, st)
    st.release = "/h/releases/e3e4372be5de"
    first = printed(render.status_screen, st).splitlines()[0]
    assert "release e3e4372be5de" in first and "deployed" not in first


def test_plans_disk_line_says_what_the_stage_writes_beside_the_free_space():
    from remote.common.answers import StageBytes

    line = render.stage_bytes_line
    fits = StageBytes(
        tokens=80_000_000, bytes_per_token=57344.0, basis="b", free=9 * 10**12, sampled=9
    )
    assert "4.2 TiB to write (80.0M tokens of rows left × 56.0 KiB a token: b)" in line(fits)
    assert line(fits).endswith("the disk has 8.2 TiB free")
    short = StageBytes(
        tokens=80_000_000, made=60_000_000, bytes_per_token=57344.0, free=10**12, sampled=9
    )
    out = line(short)  # 1.15 TB (1.0 TiB) left for 1 TB (931.3 GiB) free
    # what is left, said as left: a user took it for the whole stage at these caps
    assert "1.0 TiB to write (20.0M tokens of rows left × 56.0 KiB a token: " in out
    assert "; 60.0M of the 80.0M made already)" in out
    assert "it does not fit" in out
    assert "lower the caps" in out
    assert "every row is made" in line(StageBytes(tokens=5, made=5, sampled=1))
    assert "the bytes a token takes are not known" in line(
        StageBytes(tokens=5, basis="not known until the stage makes its first row", sampled=1)
    )
    assert "return_token_ids: true" in line(StageBytes())


def test_a_dry_run_deploy_says_what_it_would_send_and_no_send_time():
    """A dry run sends nothing: `would send 1.0 KiB in 0.03s` read as a send that took time."""
    from deploytool.ops.deploy import DeployResult

    dry = DeployResult("gpu", "abc", None, added=["job.json"], bytes_sent=1024, seconds=0.03)
    dry.dry_run = True
    out = printed(render.deploy_result, dry)
    assert out.splitlines()[-1] == "  would send 1.0 KiB; nothing sent (--dry-run)"
    assert "0.03s" not in out
    dry.added, dry.previous = [], "abc"  # the host has it all: still no word of a send
    assert "nothing to send" in printed(render.deploy_result, dry)
    real = DeployResult("gpu", "abc", None, added=["job.json"], bytes_sent=1024, seconds=0.03)
    assert printed(render.deploy_result, real).splitlines()[-1] == "  sent 1.0 KiB in 0.03s"


def test_a_complete_datasets_rate_is_its_mean_and_the_legend_says_why_rows_exceed_the_total():
    """status and tail: B1 complete beside B2 running read B1's share of the last minute (then a
    mean once it aged out), and eight rows summed to three times the total, unsaid."""
    import io

    from deploytool.views import progress, render
    from remote.common.status import DatasetStatus, JobView

    st = JobView(state="running", host="gpu1", tokens_per_s=3_000.0, mean_tokens_per_s=2_900.0)
    st.datasets = {
        "B1": DatasetStatus(
            state="complete", done=12, target=12, tokens_per_s=337.0, mean_tokens_per_s=3_300.0
        ),
        "B2": DatasetStatus(
            state="running", done=3, target=12, tokens_per_s=2_663.0, mean_tokens_per_s=2_800.0
        ),
    }
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=400, highlight=False), now=0)
    rows = {
        x.split()[0]: x.split()[4]
        for x in buf.getvalue().splitlines()
        if x.strip()[:2] in ("B1", "B2")
    }
    assert rows == {"B1": "3.3k*", "B2": "2.8k*"}, buf.getvalue()
    assert "add up to more than the job's" in buf.getvalue()
    assert "total 0 tokens, 3.0k tok/s" in buf.getvalue()  # the job's last minute, while it runs
    tail = io.StringIO()
    Console(file=tail, width=400, highlight=False).print(progress.view({"gpu1": st}, {}, now=0))
    assert "3.3k*" in tail.getvalue() and "add up to more than the job's" in tail.getvalue()


def test_a_rollback_from_a_release_that_ran_says_it_went_to_the_one_that_ran_before_it():
    """It said `the last release a runner ran from`, which the release it left was."""
    from remote.common.answers import RolledBack

    ran = RolledBack(current="aaa", previous="bbb", host="box", why="ran", previous_ran=True)
    assert printed(render.rollback_result, ran).splitlines() == [
        "box: current -> aaa (was bbb): the last release a runner ran from before it"
    ]
    ran.previous_ran = False
    assert printed(render.rollback_result, ran).splitlines() == [
        "box: current -> aaa (was bbb, from which no runner ran): the last release a runner ran "
        "from"
    ]


def test_a_refused_file_of_a_pull_is_said_without_a_size_it_never_had():
    """`refused: local copy is not a prefix of the host's file B1.jsonl (0 B)`: 0 B of what?"""
    from deploytool.ops.pull import Pulled, PullResult

    r = PullResult("gpu1", "pulled/gpu1")
    r.files = {"B1.jsonl": Pulled("refused: local copy is not a prefix of the host's file")}
    r.files["B2.jsonl"] = Pulled("appended", 2048)
    text = printed(render.pull_result, r)
    assert "refused: local copy is not a prefix of the host's file B1.jsonl\n" in text
    assert "appended   B2.jsonl (2.0 KiB)" in text and "0 B" not in text


def test_a_rate_of_finished_answers_far_below_what_streams_says_what_streams():
    """256 answers of 8k tokens in flight, few finished: `total 0 tokens, 5* tok/s, ETA 21m39s`
    while the engine made 1.5k tok/s (the ETA's own pace)."""
    from remote.common.status import DatasetStatus, JobView, KeptStatus

    st = JobView(state="running", mean_tokens_per_s=5.0, in_flight=256, eta_s=1299)
    st.datasets = {"B1": DatasetStatus("running", 0, 256, 0, 256, in_flight=256, eta_s=1299)}
    st.kept = KeptStatus(streamed_per_s=1500.0)
    total = next(x for x in printed(render.status_screen, st).splitlines() if "  total " in x)
    assert "5* tok/s (1.5k tok/s streaming, answers in flight included), ETA" in total, total
    st.tokens_per_s = 1400.0  # the last minute's finished answers near it: nothing to add
    assert "streaming" not in printed(render.status_screen, st)
