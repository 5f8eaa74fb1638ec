"""What status and tail say of a recovery: recovering, gave up, unsupervised."""

from __future__ import annotations

from remote.common.status import ProcessWatch


def test_status_and_tail_say_recovering_gave_up_and_unsupervised():
    import io

    from rich.console import Console

    from deploytool.views import progress, render
    from remote.common.status import JobView, Supervision

    st = JobView(state="running", host="gpu1")
    st.supervision = Supervision(
        enabled=True,
        supervised=True,
        pid=7,
        server=ProcessWatch(
            state="backoff", why="the server process is gone", attempt=2, of=5, next_try_in_s=20
        ),
        runner=ProcessWatch(state="watching", restarts=1, last_cause="the runner (pid 9) died"),
        note="a reboot needs `invoke restart`",
    )
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=200, highlight=False), now=0)
    text = buf.getvalue()
    assert (
        "RECOVERING server: the server process is gone; attempt 2 of 5, next try in 0m20s" in text
    )
    assert (
        "runner restarted 1x by the watcher since a command last started it; last cause: the "
        "runner (pid 9) died" in text
    )
    line = progress.plain_line("gpu1", st, 0)
    assert (
        "RECOVERING server" in line and "reboot" not in line
    )  # tail's plain line: only what matters
    assert "restarted 1x" not in line  # a recovery over: not repeated on every line
    st.supervision = Supervision(
        enabled=True,
        server=ProcessWatch(
            state="fatal", why="gave up", log=["CUDA error: an illegal memory access"]
        ),
        note="unsupervised: the watcher is not running; `invoke restart` brings it back",
    )
    lines = [t for t, _ in progress.recovery_lines(st)]
    assert lines[0] == (  # and the way back, for the host it is about
        "GAVE UP on the server: gave up; `invoke restart --host gpu1` starts it again, its "
        "restarts counted anew"
    )
    assert "illegal memory access" in lines[1]
    assert lines[-1].startswith("unsupervised")


def test_the_hidden_states_stage_is_shown_in_rows_without_a_finish_reason():
    import io

    from rich.console import Console

    from deploytool.views import progress, render
    from remote.common.status import DatasetStatus, DiskStatus, JobView

    st = JobView(
        state="running",
        host="gpu1",
        stage="hidden-states",
        samples_per_s=11.5,
        tokens_per_s=26_300.0,
    )
    st.datasets = {
        "B1": DatasetStatus(
            state="running", done=3, target=4, records=3, completion_tokens=360, finish_length=3
        )
    }
    st.completion_tokens = 360
    st.disk = DiskStatus(free_bytes=1 << 30, total_bytes=1 << 40, full=True)
    line = progress.plain_line("gpu1", st, 0)
    # tail said 11.5 rows/s where status said 26.3k tok/s: one figure, in status's unit
    assert "gpu1: hidden-states running | B1 3/4 rows | 360 tok in rows 26.3k tok/s" in line
    assert "finish=length" not in line
    assert "DISK FULL: no new rows until there is space (1.0 GiB free now)" in line
    assert "pull --hidden-states --free" in line
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=200, highlight=False), now=0)
    text = buf.getvalue()
    assert "tokens in rows" in text and "failed" in text and "length-cut" not in text
    assert "total 360 tokens in rows, 26.3k tok/s" in text
    buf = io.StringIO()
    Console(file=buf, width=200).print(progress.host_view("gpu1", st, 0))
    assert "hidden states running" in buf.getvalue() and "26.3k tok/s" in buf.getvalue()
    assert "rows/s" not in buf.getvalue() + line
    st.datasets["B1"].records = 5  # two rows past the cap: said as rows, not records
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=400, highlight=False), now=0)
    assert (
        "rows beyond the cap (of answers past it" in buf.getvalue() and ": B1 2" in buf.getvalue()
    )
    assert "records beyond the cap" not in buf.getvalue()
    st.datasets["B1"].records = 3
    st.datasets["B1"].mean_tokens_per_s = 20_000.0  # a starred mean is said of rows, not answers
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=400, highlight=False), now=0)
    assert "tokens over the time their rows were being made" in buf.getvalue()
    assert "answers" not in buf.getvalue()


def test_a_dataset_its_budget_ended_short_says_why_in_status_and_tail():
    import io

    from rich.console import Console

    from deploytool.views import progress, render
    from remote.common.status import DatasetStatus, JobView

    big = DatasetStatus("complete", 276, 300, budget=700_000, budget_reached=True)
    st = JobView(state="finished", host="gpu1", datasets={"BIG": big})
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=200, highlight=False), now=0)
    row = next(line for line in buf.getvalue().splitlines() if line.split()[:1] == ["BIG"])
    assert "276/300" in row and "budget reached" in row and "complete" not in row
    assert "BIG 276/300 (budget reached)" in progress.plain_line("gpu1", st, 0)


def test_every_view_says_a_job_is_draining_until_it_stops():
    import io

    from rich.console import Console

    from deploytool.views import progress, render
    from remote.common.status import JobView

    st = JobView(state="running", host="gpu1", in_flight=16, draining=True)
    text = "draining: no new requests; the 16 in flight finish, then it stops"
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=200, highlight=False), now=0)
    assert text in buf.getvalue() and text in progress.plain_line("gpu1", st, 0)
    # nothing new is sent: no ETA, and no dataset reads running
    from remote.common.status import DatasetStatus

    st.datasets = {"B1": DatasetStatus("running", 3, 10, 3, 10, in_flight=16, eta_s=73)}
    st.eta_s = 77
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=200, highlight=False), now=0)
    row = next(x.split() for x in buf.getvalue().splitlines() if x.strip().startswith("B1"))
    assert row[2] == "stopping" and "1m13s" not in buf.getvalue() and "1m17s" not in buf.getvalue()
    other = JobView(state="running", host="gpu2", eta_s=30)
    assert progress.totals([st, other])[2] == 30  # the host still at work gives the ETA
    other.stopping = 10.0
    assert progress.totals([st, other])[2] is None  # every host ending its work: none to give
    other.state, st.state = "finished", "finished"
    assert progress.totals([st, other])[2] == 0
    st.state = "stopped"
    assert "draining" not in progress.plain_line("gpu1", st, 0)


def test_a_drain_a_restart_on_the_host_makes_says_a_runner_starts_after_it():
    """`invoke restart --drain`, detached by a Ctrl-C: status said `… finish, then it stops`."""
    from deploytool.views import progress
    from remote.common.status import JobView, Supervision

    st = JobView(state="running", host="gpu1", in_flight=16, draining=True)
    st.supervision = Supervision(restarting=True)
    line = progress.plain_line("gpu1", st, 0)
    assert "the 16 in flight finish, then a restart on the host starts the new runner" in line
    assert "then it stops" not in line


def test_every_view_says_a_job_is_stopping_in_its_grace_period():
    """A SIGTERM (a stop, or someone's kill): no new requests, and the grace those in flight get;
    it read `running` with nothing said until it stopped."""
    import io

    from rich.console import Console

    from deploytool.views import progress, render
    from remote.common.status import JobView

    st = JobView(state="running", host="gpu1", in_flight=16, stopping=30.0, draining=True)
    text = (
        "stopping: no new requests; the 16 in flight get 30s from the stop's start to finish, "
        "then are cut off (the next start asks them again)"
    )
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=200, highlight=False), now=0)
    assert text in buf.getvalue() and text in progress.plain_line("gpu1", st, 0)
    assert "draining" not in buf.getvalue()  # the stop that came after the drain is what goes on
    st.state = "stopped"
    assert "stopping" not in progress.plain_line("gpu1", st, 0)


def test_a_job_in_its_stop_grace_is_stopping_in_the_first_line_of_every_view():
    """A stop's grace (answers in flight): status's first line and tail's line began `running`,
    only the lines under them said it was stopping."""
    import io

    from rich.console import Console

    from deploytool.views import progress, render
    from remote.common.status import JobView, RunnerInfo

    runner = RunnerInfo(alive=True, pid=9, uptime_s=60)
    st = JobView(state="running", host="gpu1", in_flight=16, stopping=30.0, eta_s=77, runner=runner)
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=200, highlight=False), now=0)
    assert buf.getvalue().splitlines()[0].startswith("gpu1: stopping (pid 9, up 1m00s)")
    assert progress.plain_line("gpu1", st, 0).split(" | ")[0].endswith(" gpu1: stopping")
    buf = io.StringIO()
    Console(file=buf, width=200).print(progress.host_view("gpu1", st, 0))
    assert buf.getvalue().startswith("gpu1: stopping  pid")
    # no row reads running, and no ETA is given: nothing new is sent, none could be met
    from remote.common.status import DatasetStatus

    st.datasets = {"B9": DatasetStatus("running", 343, 600, 343, 600, in_flight=16, eta_s=73)}
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=200, highlight=False), now=0)
    row = next(x.split() for x in buf.getvalue().splitlines() if x.strip().startswith("B9"))
    assert row[2] == "stopping" and "1m13s" not in buf.getvalue() and "1m17s" not in buf.getvalue()
    line = progress.plain_line("gpu1", st, 0)
    assert "ETA -" in line or "ETA" not in line, line
    buf = io.StringIO()
    Console(file=buf, width=200).print(progress.host_view("gpu1", st, 0))
    assert "running" not in buf.getvalue() and "1m13s" not in buf.getvalue(), buf.getvalue()
    st.state = "stopped"  # its verdict: the stop is over
    assert progress.plain_line("gpu1", st, 0).split(" | ")[0].endswith(" gpu1: stopped")


def test_stop_drain_says_the_requests_in_flight_finish_before_the_grace_counts():
    import io

    from rich.console import Console

    from deploytool.views.render_restart import Stopping
    from remote.common.status import JobView, RunnerInfo

    st = JobView(state="running", in_flight=16, runner=RunnerInfo(alive=True, pid=9))
    buf = io.StringIO()
    Stopping("gpu1", 5.0, True, Console(file=buf, width=200))(st, 0.0)
    assert "the 16 in flight finish, then SIGTERM, 5s of grace, and the runner exits" in (
        " ".join(buf.getvalue().split())
    )


def test_stop_says_how_it_goes_at_the_first_second_each_change_and_every_five_seconds():
    import io

    from rich.console import Console

    from deploytool.views.render_restart import Stopping
    from remote.common.status import JobView, RunnerInfo

    buf = io.StringIO()
    on_status = Stopping("gpu1", 30.0, False, Console(file=buf, width=300))
    running = JobView(state="running", in_flight=16, runner=RunnerInfo(alive=True, pid=9))
    for second in range(0, 35):
        on_status(running, float(second))
    on_status(JobView(state="stopped", runner=RunnerInfo(alive=False)), 35.0)
    lines = buf.getvalue().splitlines()
    assert lines[0] == (  # what happens, in order: the grace, the runner's own exit, its kill
        "gpu1: stopping runner pid 9: SIGTERM; the 16 requests in flight get 30s to finish, then "
        "the runner cuts off the rest and exits (killed at 33s if it has not)"
    )
    assert [line.split(": ", 1)[1] for line in lines[1:]] == [
        "waiting 1s: 16 in flight, 29s of grace left",
        "waiting 6s: 16 in flight, 24s of grace left",
        "waiting 11s: 16 in flight, 19s of grace left",
        "waiting 16s: 16 in flight, 14s of grace left",
        "waiting 21s: 16 in flight, 9s of grace left",
        "waiting 26s: 16 in flight, 4s of grace left",
        # no count: a `stop --grace 1` said `cuts off its 0 in flight`, then `cut off: 3`
        "waiting 30s: grace over: the runner cuts off what is still in flight and exits; killed "
        "at 33s if it has not",
        "waiting 33s: the runner did not exit: killing it and its processes (SIGKILL)",
        # never "SIGKILL next" for a runner gone: what is left is its processes, if any
        "waiting 35s: runner gone; ending any process of it still running",
    ]
    buf = io.StringIO()
    on_status = Stopping("gpu1", 30.0, True, Console(file=buf, width=200))
    draining = JobView(state="running", in_flight=3, runner=RunnerInfo(alive=True, pid=9))
    on_status(draining, 1.0)
    on_status(None, 2.0)  # a look that failed: no news
    on_status(draining, 3.0)
    on_status(JobView(state="running", in_flight=3, stopping=30.0, runner=draining.runner), 4.0)
    shown = [line.split(": ", 1)[1] for line in buf.getvalue().splitlines()]
    assert shown == [
        "waiting 1s: 3 in flight, draining",
        "waiting 4s: 3 in flight, SIGTERM sent, 30s of grace",  # the drain timed out
    ]


def test_a_stop_that_waited_on_a_restart_says_the_new_runner_it_stops_with_its_own_grace():
    """`invoke stop` typed 2 s into `restart --force --grace 5`: it waited on the restart, which
    started runner 6247, and stopped that one with its own 30 s, while it said `in the stop under
    way's 5s of grace` for 31 s under the old pid."""
    import io

    from rich.console import Console

    from deploytool.views.render_restart import Stopping
    from remote.common.status import JobView, RunnerInfo

    buf = io.StringIO()
    on_status = Stopping("sim1", 30.0, False, Console(file=buf, width=300))
    old = RunnerInfo(alive=True, pid=6005)
    on_status(JobView(state="running", in_flight=8, stopping=5.0, runner=old), 0.0)
    on_status(JobView(state="stopped", runner=RunnerInfo(alive=False)), 3.0)
    new = JobView(state="running", in_flight=8, runner=RunnerInfo(alive=True, pid=6247))
    for second in (4.0, 5.0, 9.0, 10.0):
        on_status(new, second)
    lines = [" ".join(line.split()) for line in buf.getvalue().splitlines()]
    assert "the stop under way's 5s of grace" in lines[0] and "6005" in lines[0]
    one = io.StringIO()  # `the 1 requests in flight get 25s`
    Stopping("sim1", 25.0, False, Console(file=one, width=300))(
        JobView(state="running", in_flight=1, runner=RunnerInfo(alive=True, pid=7)), 0.0
    )
    assert "the 1 request in flight gets 25s to finish" in one.getvalue()
    assert lines[1:] == [
        "sim1: waiting 3s: runner gone; ending any process of it still running",
        "sim1: runner pid 6247 was started meanwhile: stopping it: SIGTERM; the 8 "
        "requests in flight get 30s to finish, then the runner cuts off the rest and exits (killed "
        "at 33s if it has not)",
        "sim1: waiting 5s: 8 in flight, 29s of grace left",
        "sim1: waiting 10s: 8 in flight, 24s of grace left",  # every 5 s, as before
    ]


def test_a_dataset_left_out_by_datasets_is_said_not_run_in_every_view():
    import io

    from rich.console import Console

    from deploytool.views import progress, render
    from remote.common.caps import Caps
    from remote.common.status import DatasetStatus, JobView

    st = JobView(state="running", host="gpu1", caps=Caps(datasets=["B2"]).to_dict())
    st.datasets = {  # B1: no target now; its rate is the mean of the runs that made it
        "B1": DatasetStatus(
            state="complete", done=0, target=0, records=30, mean_tokens_per_s=734.0
        ),
        "B2": DatasetStatus(state="running", done=3, target=9, tokens_per_s=120.0),
    }
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=200, highlight=False), now=0)
    b1 = next(line for line in buf.getvalue().splitlines() if line.strip().startswith("B1"))
    assert "not run" in b1 and "complete" not in b1 and "734" not in b1, b1
    assert progress.mean_note() not in buf.getvalue()  # no starred mean is shown
    # its records stay, as status says them (tail said `B1 0/0`, as if they were gone)
    assert "B1 30 made (not run)" in progress.plain_line("gpu1", st, 0)
    assert "B2 3/9 |" in progress.plain_line("gpu1", st, 0)


def test_a_watcher_the_runner_started_again_is_said():
    from deploytool.views import progress
    from remote.common.status import JobView, Supervision

    st = JobView(state="running", watcher_restarts=1, supervision=Supervision(supervised=True))
    lines = [text for text, _ in progress.extra_lines(st, 0.0)]
    assert "watcher started again 1x by the runner (it was gone)" in lines


def test_runners_without_a_pid_file_are_said_by_every_view():
    """`ctl status` looks for them at each look, tail's included: status and tail both say so."""
    from deploytool.views import progress
    from remote.common.status import JobView

    st = JobView(state="running", strays=[4242])
    text = "runner processes without a pid file: [4242] (restart or stop takes care of them)"
    assert (text, "red") in progress.extra_lines(st, 0.0)
    assert text in progress.plain_line("gpu1", st, 0.0)


def test_a_rate_not_measured_yet_is_a_dash_and_an_ended_host_adds_none_to_the_speed_now():
    from deploytool.views.progress import fmt_rate, totals
    from remote.common.status import DatasetStatus, JobView

    # a young runner writes 0 where the job has a mean; a dataset just begun has none of its own
    young = JobView(state="running", tokens_per_s=0.0, mean_tokens_per_s=900.0)
    begun = DatasetStatus("running", 1, 10, tokens_per_s=0.0, mean_tokens_per_s=None)
    assert fmt_rate(young) == "900*" and fmt_rate(young, begun) == "-"  # not "0"
    ended = JobView(state="finished", mean_tokens_per_s=5000.0, completion_tokens=10)
    working = JobView(state="running", tokens_per_s=1000.0, completion_tokens=5, eta_s=60)
    assert totals([ended, working]) == (15, "1.0k", 60)  # the speed now: the ended host's none
    assert totals([ended, JobView(state="stopped", mean_tokens_per_s=1000.0)])[1] == "6.0k*"


def test_status_and_tail_say_a_live_runners_status_is_stale_by_the_one_rule():
    """status.json not rewritten past STALE_AFTER by a runner at work: tail's health line said
    it, status never did (in any stage); now both, in the same words, and neither once it ended."""
    import io

    from rich.console import Console

    from deploytool.views import progress, render
    from remote.common.caps import Caps
    from remote.common.status import STALE_AFTER, DatasetStatus, JobView

    def status_text(st, now):
        buf = io.StringIO()
        render.status_screen(st, Console(file=buf, width=200, highlight=False), now=now)
        return buf.getvalue()

    ds = {"B1": DatasetStatus(done=5, target=24)}
    for caps in ({}, Caps(stage="draft").to_dict()):  # the answers' table, and the draft's
        st = JobView(state="running", host="gpu1", updated_at=1_000.0, datasets=ds, caps=caps)
        text = "status not updated for 1m40s"
        assert text in status_text(st, 1_100.0)
        assert text in progress.plain_line("gpu1", st, 1_100.0)
        assert text in progress.health(st, 1_100.0)[0]
        now = 1_000.0 + STALE_AFTER  # at the threshold: still current, in every view
        assert st.stale_for(now) is None and "not updated" not in status_text(st, now)
        assert "not updated" not in progress.plain_line("gpu1", st, now)
        st.state = "stopped"  # a verdict is written once: never stale
        assert "not updated" not in status_text(st, 1_100.0)
        assert "not updated" not in progress.plain_line("gpu1", st, 1_100.0)


def test_tail_says_hosts_yaml_differs_from_the_deployed_job_in_the_words_status_does():
    import io

    from rich.console import Console

    from deploytool.views import progress, render
    from remote.common.status import DatasetStatus, JobView

    st = JobView(state="running", host="gpu1", datasets={"B1": DatasetStatus(done=5, target=24)})
    text = "hosts.yaml's job is not the one deployed: `invoke deploy --host gpu1` sends it"

    def shown(view):
        buf = io.StringIO()
        Console(file=buf, width=200, highlight=False).print(view)
        return buf.getvalue()

    assert text not in progress.plain_line("gpu1", st, 0.0) + shown(
        progress.host_view("gpu1", st, 0.0)
    )
    st.job_differs = True
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=200, highlight=False), now=0.0)
    assert text in buf.getvalue()
    assert text in progress.plain_line("gpu1", st, 0.0)  # piped tail
    assert text in shown(progress.host_view("gpu1", st, 0.0))  # the live view and --once


def test_an_eta_reckoned_at_the_jobs_mean_is_starred_as_the_rate_is():
    """A runner younger than a minute of its own answers: its ETA is a guess at the job's mean
    (a restart on slower hardware read 0m04s for a minute of work): said so, in every view."""
    import io

    from rich.console import Console

    from deploytool.views import progress, render
    from remote.common.status import DatasetStatus, JobView

    young = JobView(state="running", tokens_per_s=0.0, mean_tokens_per_s=900.0, eta_s=77)
    young.datasets = {"B1": DatasetStatus("running", 3, 10, 3, 10, in_flight=2, eta_s=77)}
    assert progress.job_eta(young) == "1m17s*"
    buf = io.StringIO()
    render.status_screen(young, Console(file=buf, width=400, highlight=False), now=0)
    assert (
        "ETA 1m17s*" in buf.getvalue() and "a starred ETA, a guess at that mean" in buf.getvalue()
    )
    assert "ETA 1m17s*" in progress.plain_line("gpu1", young, 0)
    measured = JobView(state="running", tokens_per_s=800.0, mean_tokens_per_s=900.0, eta_s=77)
    assert progress.job_eta(measured) == "1m17s"
    # a runner that says how it reckoned: starred only where that was the mean
    young.eta_guess = False  # at what streams, though the rate shown is still the mean
    assert progress.job_eta(young) == "1m17s"
    measured.eta_guess = True
    assert progress.job_eta(measured) == "1m17s*"


def test_an_eta_run_out_while_answers_are_still_in_flight_says_finishing_not_0m00s():
    """The last answers run longer than expected: what is left reckons to nothing while they
    stream on (`ETA 0m00s` for 45 s read as a job that hangs)."""
    import io

    from rich.console import Console

    from deploytool.views import progress, render
    from remote.common.status import DatasetStatus, JobView

    st = JobView(state="running", tokens_per_s=80.0, eta_s=0, in_flight=1, eta_guess=False)
    st.datasets = {
        "B1": DatasetStatus("complete", 10, 10, 10, 10, eta_s=0),
        "B2": DatasetStatus("running", 9, 10, 9, 10, in_flight=1, eta_s=0),
    }
    assert progress.job_eta(st) == "finishing"
    assert progress.dataset_eta(st, "B2") == "finishing" and progress.dataset_eta(st, "B1") == "-"
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=400, highlight=False), now=0)
    assert "ETA finishing" in buf.getvalue() and "0m00s" not in buf.getvalue()
    assert "ETA finishing" in progress.plain_line("gpu1", st, 0)
    done = JobView(state="finished", eta_s=0)
    assert progress.all_hosts_eta([done, st], progress.totals([done, st])[2]) == "finishing"
    st.stage = "hidden-states"  # rows of under a second: `B8 0/24 running … ETA finishing`
    assert progress.job_eta(st) == "0m00s" and progress.dataset_eta(st, "B2") == "0m00s"
    st.stage = "generate"
    st.in_flight = st.datasets["B2"].in_flight = 0  # nothing in flight: an ETA of nothing
    assert progress.job_eta(st) == "0m00s"


def test_a_dataset_left_out_live_shows_its_records_made_not_0_of_0():
    import io

    from rich.console import Console

    from deploytool.views import progress, render
    from remote.common.caps import Caps
    from remote.common.status import DatasetStatus, JobView

    st = JobView(state="running", host="gpu1", caps=Caps(datasets=["B2"]).to_dict())
    st.not_run = ["B1"]
    st.datasets = {
        "B1": DatasetStatus("complete", 0, 0, 40, 132),  # deselected live: no target
        "B2": DatasetStatus("running", 3, 10, 3, 10, in_flight=2),
    }
    assert progress.done_text(st, "B1") == "40 made" and progress.done_text(st, "B2") == "3/10"
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=300, highlight=False), now=0)
    row = next(x.split() for x in buf.getvalue().splitlines() if x.strip().startswith("B1"))
    assert row[1:5] == ["40", "made", "not", "run"], row
    assert "not run (--datasets): B1: their records are kept" in buf.getvalue()
