"""What restart prints: the caps table, a cap beyond the file, what the command changed."""

import functools
import io

from rich.console import Console

from deploytool.views import render_restart
from remote.common.caps import CapRow, Caps


def printed(fn, *args) -> str:
    buf = io.StringIO()
    fn(*args, out=Console(file=buf, width=200, highlight=False))
    return buf.getvalue()


def test_a_cap_beyond_the_file_is_said():
    text = printed(
        render_restart.caps_table,
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
    text = printed(render_restart.caps_table, {"B1": CapRow(0, 24, "pending", prompts=32, cap=24)})
    assert "*" not in text


def test_the_caps_table_marks_what_a_restart_changed():
    from remote.common.caps import Caps

    rows = {
        "B1": CapRow(4, 4, "complete", prompts=16, cap=4, was=4),
        "B2": CapRow(4, 6, "running", prompts=16, cap=6, was=4),
        "B3": CapRow(4, 0, "complete", prompts=16, cap=4, was=4, selected=False),
    }
    text = printed(
        lambda out: render_restart.caps_table(rows, out, Caps(4, {"B2": 6}, 10_000), Caps(4))
    )
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert "→" not in lines["B1"] and "4 → 6" in lines["B2"] and "4 → not run" in lines["B3"]
    assert "max-tokens none → 10.0k" in text
    same = {"B1": CapRow(4, 4, "complete", prompts=16, cap=4, was=4)}
    assert "caps unchanged" in printed(
        lambda out: render_restart.caps_table(same, out, Caps(4), Caps(4))
    )


def test_eval_samples_typed_in_another_stage_says_which_stages_ask_them():
    """--eval-samples is kept with the caps in any stage: typed while the answers are made, it is
    said to be for the measuring stages, not left to look like a change that did nothing."""
    rows = {"B1": CapRow(4, 4, "complete", prompts=16, cap=4, was=4)}
    now = printed(lambda out: render_restart.caps_table(rows, out, Caps(eval_samples=30), Caps()))
    assert (
        "eval-samples server.draft's → 30 (held-out prompts a dataset; the draft and baseline "
        "stages ask them)" in now
    )
    draft = printed(
        lambda out: render_restart.caps_table(
            rows, out, Caps(eval_samples=30, stage="draft"), Caps(stage="draft")
        )
    )
    assert "eval-samples server.draft's → 30 (held-out prompts a dataset)" in draft


def test_a_raised_target_says_how_many_prompts_the_file_lets_it_reach():
    from remote.common.answers import RestartAnswer

    rows = {
        "B1": CapRow(5, 60, "pending", prompts=60, cap=100, was=5),  # the file ends first
        "B2": CapRow(5, 20, "pending", prompts=60, cap=20, was=5),
        "B3": CapRow(1, 1, "complete", prompts=1, cap=100, was=5),  # nothing more to run
    }
    text = printed(render_restart.raised_targets, RestartAnswer(host="gpu", caps=rows))
    assert text.splitlines() == [
        "gpu: targets go up: B1 (5 → 60 prompts: every prompt of the file); B2 (5 → 20 prompts)"
    ]
    # a file the host could not count: the cap is the most it reaches, not a target
    rows = {"B4": CapRow(cap=7000, was=28)}
    text = printed(render_restart.raised_targets, RestartAnswer(host="gpu", caps=rows))
    assert text.splitlines() == ["gpu: B4's target goes up (28 → up to 7,000 prompts)"]


def test_raised_targets_are_one_line_naming_each_dataset_alike_ones_together():
    """Eight datasets raised alike were eight lines before anything was done; one is said as it
    always was."""
    from remote.common.answers import RestartAnswer

    rows = {f"B{i}": CapRow(4, 24, "pending", prompts=32, cap=24, was=4) for i in range(1, 9)}
    rows["B3"] = CapRow(4, 4, "complete", prompts=32, cap=4, was=4)  # unchanged: not named
    text = printed(render_restart.raised_targets, RestartAnswer(host="gpu", caps=rows))
    assert text.splitlines() == ["gpu: targets go up: B1, B2, B4, B5, B6, B7, B8 (4 → 24 prompts)"]
    one = {"B2": CapRow(4, 6, "pending", prompts=32, cap=6, was=4)}
    text = printed(render_restart.raised_targets, RestartAnswer(host="gpu", caps=one))
    assert text.splitlines() == ["gpu: B2's target goes up (4 → 6 prompts)"]
    # the same cap over a file grown, and a dataset new to the job: said too; one selected again
    # with every prompt of its target done (it read "not run → 40") is not
    grown = {
        "B1": CapRow(32, 232, "pending", prompts=232, was_target=32),
        "B9": CapRow(0, 40, "pending", prompts=40, was_target=0),
        "B2": CapRow(40, 40, "complete", prompts=40, was_selected=False),
    }
    text = printed(render_restart.raised_targets, RestartAnswer(host="gpu", caps=grown))
    assert text.splitlines() == [
        "gpu: targets go up: B1 (32 → 232 prompts: every prompt of the file); B9 (0 → 40 prompts: "
        "every prompt of the file)"
    ]


def test_a_dry_run_shows_the_targets_and_states_its_caps_would_give_and_says_a_raise():
    from remote.common.answers import RestartAnswer
    from remote.common.caps import Caps

    rows = {  # complete at a cap of 10: the host's planned rows (caps_summary's, for a dry run)
        "B1": CapRow(10, 20, "pending", prompts=40, cap=20, was=10),
        "B2": CapRow(10, 40, "pending", prompts=40, cap=50, was=10),
        "B3": CapRow(10, 10, "complete", prompts=40, cap=10, was=10, selected=False),
    }
    caps, was = Caps(20, {"B2": 50}, datasets=["B1", "B2"]), Caps(10)
    answer = RestartAnswer(host="gpu", mode="start", dry_run=True, caps=rows, kept=caps, was=was)
    text = printed(render_restart.restart_result, answer)
    lines = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}
    assert lines["B1"][-2:] == ["20", "pending"] and lines["B2"][-2:] == ["40*", "pending"]
    assert lines["B3"][-3:] == ["-", "not", "run"]
    assert (
        "gpu: targets go up: B1 (10 → 20 prompts); B2 (10 → 40 prompts" in text
    )  # as restart says it


def test_a_dataset_left_out_reads_not_run_after_a_restart_as_in_a_dry_run_and_status():
    """A live re-cap's rows come from the runner, which gives a dataset with no target 0 of 0,
    complete: the table says `not run`, as its dry run and status do."""
    from remote.common.answers import RestartAnswer

    rows = {
        "B1": CapRow(4, 4, "complete", prompts=16, cap=4, was=4),
        "B3": CapRow(0, 0, "complete", prompts=16, cap=4, was=4, selected=False),
    }
    answer = RestartAnswer(
        host="gpu", mode="live", pid=7, caps=rows, kept=Caps(4, datasets=["B1"]), was=Caps(4)
    )
    lines = {
        line.split()[0]: line
        for line in printed(render_restart.restart_result, answer).splitlines()
    }
    # no done of a dataset with no target: it read `0` beside status's `16 made`
    assert lines["B3"].split()[-4:] == ["-", "-", "not", "run"], lines["B3"]
    assert "complete" not in lines["B3"] and "4 → not run" in lines["B3"]


def test_a_stop_says_its_cut_off_requests_are_asked_again_not_lost():
    from remote.common.answers import StopAnswer

    buf = io.StringIO()
    r = StopAnswer(was_running=True, stopped=[7], lost_in_flight=14, host="gpu1")
    render_restart.stop_result(r, Console(file=buf, width=200))
    out = buf.getvalue()
    assert "requests cut off in flight: 14 (the next start asks them again)" in out
    assert "lost" not in out


def test_a_dry_run_under_a_moved_target_says_the_done_the_runner_will_count():
    rows = {
        "B1": CapRow(done=5, target=5, state="complete", prompts=32, cap=5, was=20),
        "B2": CapRow(done=5, done_most=20, target=20, state="?", prompts=32, cap=20, was=5),
    }
    buf = io.StringIO()
    render_restart.caps_table(rows, Console(file=buf, width=200), Caps(), Caps())
    out = buf.getvalue()
    lines = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.startswith("B")}
    assert lines["B1"][-3:] == ["5", "5", "complete"]
    assert lines["B2"][-3:] == ["5–20", "20", "?"]
    assert "B2: done a range: the status cannot tell how many" in out


def test_the_train_stage_caps_table_says_the_rows_it_trains_on_not_dashes():
    rows = {"B1": CapRow(done=0, target=12, state="running", prompts=0, cap=3)}
    buf = io.StringIO()
    render_restart.caps_table(rows, Console(file=buf, width=200), Caps(), Caps())
    line = next(ln.split() for ln in buf.getvalue().splitlines() if ln.startswith("B1"))
    assert line[-3:] == ["0", "12", "running"], line


def test_a_stop_says_what_it_found_in_its_one_line():
    from remote.common.answers import StopAnswer

    found = (
        "the last one, pid 41: stopped by SIGTERM, not by deploytool (someone's kill, a shutdown)"
    )
    out = printed(render_restart.stop_result, StopAnswer(host="gpu1", found=found))
    assert out == f"gpu1: no runner was running; {found}\n"
    found = "the watcher had started it again after: the runner (pid 41) stopped by SIGTERM"
    r = StopAnswer(host="gpu1", was_running=True, stopped=[52], found=found)
    out = printed(render_restart.stop_result, r)
    assert out == f"gpu1: stopped [52]; {found}; requests cut off in flight: 0\n"
    from remote.common.status import JobView, RunnerInfo

    buf = io.StringIO()  # a second SIGTERM is "now" to the runner: no grace is promised
    on_status = render_restart.Stopping("gpu1", 30.0, False, Console(file=buf, width=200))
    signalled = JobView(
        state="running", in_flight=3, signalled="SIGTERM", stopping=5.0, runner=RunnerInfo(True, 9)
    )  # its grace, not this stop's: no command holds the host, this one acts at once
    on_status(signalled, 0)
    assert buf.getvalue() == (
        "gpu1: stopping runner pid 9: stopping already, after a SIGTERM not of deploytool's; "
        "SIGTERM again cuts off the 3 requests in flight now\n"
    )
    buf = io.StringIO()  # none seen in flight: no count said (not "the 0 requests")
    on_status = render_restart.Stopping("gpu1", 30.0, False, Console(file=buf, width=200))
    on_status(JobView(state="running", in_flight=0, runner=RunnerInfo(True, 9)), 0)
    assert buf.getvalue().startswith(
        "gpu1: stopping runner pid 9: SIGTERM; the requests in flight get 30s to finish"
    )


def test_a_restart_says_the_old_runners_stop_as_stop_does_and_nothing_of_a_live_recap():
    from remote.common.status import JobView, RunnerInfo

    buf = io.StringIO()
    on_status = render_restart.Restarting("gpu1", 30.0, True, Console(file=buf, width=200))
    old = RunnerInfo(alive=True, pid=9)
    on_status(JobView(state="running", in_flight=16, runner=old), 1.0)  # not asked to stop yet
    on_status(JobView(state="running", in_flight=16, draining=True, runner=old), 2.0)
    on_status(JobView(state="running", in_flight=5, draining=True, runner=old), 3.0)
    new = JobView(state="running", in_flight=16, runner=RunnerInfo(alive=True, pid=12))
    for second in (4.0, 5.0, 9.0):
        on_status(new, second)  # the restart's own runner: not the one stopped, said once
    assert buf.getvalue().splitlines() == [
        "gpu1: stopping runner pid 9: draining: no new requests; the 16 in flight finish, then "
        "SIGTERM, 30s of grace, and the runner exits (killed if it does not)",
        "  gpu1: waiting 1s: 5 in flight, draining",
        "  gpu1: waiting 2s: runner pid 9 gone, starting the new one",
    ]
    quiet = io.StringIO()  # a live re-cap, then a start where none ran: nothing to say meanwhile
    on_status = render_restart.Restarting("gpu1", 30.0, False, Console(file=quiet, width=200))
    for second in (1.0, 2.0, 6.0):
        on_status(JobView(state="running", in_flight=16, runner=old), second)
    on_status = render_restart.Restarting("gpu1", 30.0, False, Console(file=quiet, width=200))
    on_status(JobView(state="stopped", runner=RunnerInfo(alive=False)), 1.0)
    on_status(new, 2.0)
    assert quiet.getvalue() == ""


def test_a_restart_during_another_stops_grace_says_that_stops_grace_not_its_own():
    """`invoke stop --grace 40`, then `invoke restart` a second later: the host runs the stop to
    its end first (one command at a time), but the restart said `the 9 requests in flight get 30s
    to finish` and counted its own 30s down."""
    from remote.common.status import JobView, RunnerInfo

    buf = io.StringIO()
    on_status = render_restart.Restarting("gpu1", 30.0, False, Console(file=buf, width=300))
    old = RunnerInfo(alive=True, pid=9)
    for second in (1.0, 2.0, 8.0):
        on_status(JobView(state="running", in_flight=9, stopping=40.0, runner=old), second)
    on_status(JobView(state="running", in_flight=16, runner=RunnerInfo(alive=True, pid=12)), 9.0)
    assert buf.getvalue().splitlines() == [
        "gpu1: stopping runner pid 9: stopping already: the stop under way's 40s of grace from "
        "its start for the 9 requests in flight; the host carries out one command at a time: "
        "this one goes on once that one is done",
        "  gpu1: waiting 1s: 9 in flight, in the stop under way's 40s of grace",
        "  gpu1: waiting 7s: 9 in flight, in the stop under way's 40s of grace",
        "  gpu1: waiting 8s: runner pid 9 gone, starting the new one",
    ]
    drained = io.StringIO()  # a `stop --drain` typed before: said, never the restart's own
    on_status = render_restart.Restarting("gpu1", 30.0, False, Console(file=drained, width=300))
    on_status(JobView(state="running", in_flight=9, draining=True, runner=old), 1.0)
    on_status(JobView(state="running", in_flight=7, draining=True, runner=old), 2.0)
    assert drained.getvalue().splitlines() == [
        "gpu1: stopping runner pid 9: stopping already: the drain under way (`invoke stop` cuts "
        "it short) for the 9 requests in flight; the host carries out one command at a time: this "
        "one goes on once that one is done",
        "  gpu1: waiting 1s: 7 in flight, in the drain under way",
    ]
    own = io.StringIO()  # its own stop's grace: counted down as ever
    on_status = render_restart.Restarting("gpu1", 30.0, False, Console(file=own, width=300))
    on_status(JobView(state="running", in_flight=9, stopping=30.0, runner=old), 1.0)
    on_status(JobView(state="running", in_flight=9, stopping=30.0, runner=old), 2.0)
    assert own.getvalue().splitlines()[1] == "  gpu1: waiting 1s: 9 in flight, 29s of grace left"


def test_answers_in_flight_past_a_cap_are_said_for_the_caps_this_restart_lowered():
    rows = {
        "B1": CapRow(5, 5, "complete", prompts=32, cap=5, was=20, beyond=3, in_flight_beyond=4),
        "B2": CapRow(5, 5, "complete", prompts=32, cap=5, was=5, in_flight_beyond=2),  # earlier
    }
    text = " ".join(printed(render_restart.beyond_lowered_caps, rows).split())
    assert "B1: 4 answers in flight beyond the new cap finish and are kept beyond it" in text
    assert "3 records there already" in text and "B2" not in text
    rows["B1"].in_flight_beyond = 1
    text = " ".join(printed(render_restart.beyond_lowered_caps, rows).split())
    assert "B1: 1 answer in flight beyond the new cap finishes and is kept beyond it" in text


def test_a_forced_restart_says_on_the_hosts_line_which_datasets_it_mixes_and_how():
    from remote.common.answers import RestartAnswer

    how = "B1, B2: their records were made with different sampling (sampling.temperature 1.0 → 0.7)"
    answer = RestartAnswer(host="gpu1", mode="restart", pid=9, release="r/abc", forced_mix=how)
    out = " ".join(printed(render_restart.restart_result, answer).split())
    assert out.startswith(  # before what it did
        f"gpu1: --force mixes settings: {how}; resumed with the new ones, each now holds records "
        "made with more than one set of settings from its first new record on (one with nothing "
        "left to make "
        "keeps its records' own; `invoke export` asks for --mixed where both are written) gpu1: "
        "started runner"
    )
    answer = RestartAnswer(host="gpu1", mode="restart", dry_run=True, forced_mix=how)
    out = " ".join(printed(render_restart.restart_result, answer).split())
    assert f"gpu1: --force would mix settings: {how}; resumed with the new ones, each would" in out
    assert "mix" not in printed(render_restart.restart_result, RestartAnswer(host="gpu1"))


def test_caps_lowered_under_records_made_are_said_in_one_line():
    from remote.common.answers import RestartAnswer

    rows = {
        "B8": CapRow(7, 7, "complete", prompts=32, cap=7, was=32, beyond=25),
        "B2": CapRow(14, 14, "complete", prompts=32, cap=14, was=None, beyond=18),
        "B1": CapRow(3, 20, "running", prompts=32, cap=20, was=10),  # raised: not said here
    }
    text = printed(render_restart.lowered_targets, RestartAnswer(host="gpu", caps=rows))
    assert text.splitlines() == [
        "  targets go down: B8 (32 → 7: 25 beyond it); B2 (all → 14: 18 beyond it): those "
        "records stay on the host, out of the counts and of export (--keep beyond_cap exports "
        "them)"
    ]


def test_the_hidden_states_stage_says_its_target_is_the_answers_made_not_the_files_prompts():
    from remote.common.caps import Caps

    rows = {"B1": CapRow(0, 69, "pending", prompts=69, cap=80, was=80)}
    buf = io.StringIO()
    kept = Caps(max_samples=80, stage="hidden-states")
    render_restart.caps_table(rows, Console(file=buf, width=200), kept, kept)
    assert "* B1: fewer answers than the cap of 80: the stage takes every answer made" in (
        buf.getvalue()
    )
    assert "invoke restart --stage generate` makes the rest first" in buf.getvalue()
    assert "fewer prompts" not in buf.getvalue()


def test_answers_in_flight_of_a_dataset_left_out_live_are_not_said_beyond_a_cap():
    rows = {
        "B1": CapRow(3, 0, "", prompts=40, cap=None, was=None, selected=False, in_flight_beyond=1)
    }
    out = printed(render_restart.beyond_lowered_caps, rows)
    assert out == (
        "  B1: left out (--datasets): its 1 answer in flight finishes and is kept; nothing new "
        "is sent\n"
    )


def test_a_drain_typed_with_a_change_of_caps_alone_says_nothing_was_drained():
    """`restart --drain --cap B8=16` re-capped live and said nothing of its --drain."""
    from remote.common.answers import RestartAnswer

    live = RestartAnswer(host="gpu1", mode="live", pid=9)
    out = " ".join(printed(render_restart.restart_result, live).split())
    assert "--drain" not in out

    def said(r):
        return printed(functools.partial(render_restart.restart_result, drain=True), r)

    out = " ".join(said(live).split())
    assert out.endswith(
        "--drain: nothing stopped, nothing to drain (a change of caps alone goes to the running "
        "runner); `--hard --drain` stops it, its answers in flight finished first"
    ), out
    assert "--drain" in said(RestartAnswer(host="gpu1", mode="unchanged", pid=9))
    assert "nothing to drain" not in said(RestartAnswer(host="gpu1", mode="restart", pid=9))


def test_a_ctrl_c_over_several_hosts_says_each_goes_on():
    """`invoke stop --host a,b` and Ctrl-C: `detached: the host goes on …` named one host."""
    one = printed(render_restart.detached, "gpu1", "stopping the job")
    assert one.strip() == "detached: the host goes on stopping the job"
    both = printed(render_restart.detached, "gpu1,gpu2", "stopping the job")
    assert both.strip() == "detached: each host (gpu1, gpu2) goes on stopping the job"


def test_a_recap_held_back_names_the_rollback_with_its_id_before_the_host():
    """`invoke rollback --to --host slow` was the way it named: typed, `--to` took no value."""
    from remote.common.answers import RestartAnswer

    r = RestartAnswer(host="slow", held_back="caps given to the running runner")
    text = " ".join(printed(render_restart.held_back, r).split())
    assert "`invoke rollback --to ID --host slow`" in text and "--to --host" not in text


def test_a_cap_changed_on_a_dataset_left_out_is_said_not_hidden():
    """`restart --cap B8=4` with B8 left out read `B8  not run → not run`."""
    rows = {"B8": CapRow(0, 0, "", prompts=16, cap=4, was=None, selected=False, was_selected=False)}
    line = printed(render_restart.caps_table, rows).splitlines()[1]
    assert "not run (cap all → 4)" in line, line


def test_hosts_yaml_differing_says_what_this_restart_ran_never_a_dry_run_ran():
    """`restart --dry-run` said `this ran the deployed one`; a restart that a deploy overtook
    started the release before it, and said the same."""
    import io

    from rich.console import Console

    from deploytool.views.render_restart import restart_result
    from remote.common.answers import RestartAnswer

    said = {}
    for name, answer in {
        "dry": RestartAnswer(mode="start", dry_run=True),
        "started": RestartAnswer(
            mode="start", pid=7, release="/h/releases/a10f0c", state="running"
        ),
        "live": RestartAnswer(mode="live", pid=7, state="running"),
    }.items():
        answer.host, answer.job_differs = "sim2", True
        buf = io.StringIO()
        restart_result(answer, Console(file=buf, width=400))
        said[name] = buf.getvalue().splitlines()[0]
    assert said["dry"].endswith("; this would run the deployed one")
    assert said["started"].endswith("; this started release a10f0c")
    assert said["live"].endswith("; the runner goes on with the release it runs")


def test_caps_lowered_on_datasets_left_out_are_said_when_set_and_when_they_run_again():
    from remote.common.answers import RestartAnswer

    gone = CapRow(cap=10, was=None, selected=False, was_selected=True)
    left = RestartAnswer(mode="start", host="h", caps={"B1": CapRow(cap=10), "B2": gone})
    text = printed(render_restart.caps_moved, left)
    assert "caps changed of datasets not run now, kept for when they run again: B2 (all → 10)" in (
        text
    )
    back = CapRow(cap=10, was=10, was_selected=False, done=10, target=10, prompts=24, beyond=14)
    again = RestartAnswer(mode="start", host="h", caps={"B2": back, "B3": back})
    text = printed(render_restart.caps_moved, again)
    assert "targets below the records made: B2, B3 (run again at 10: 14 beyond each)" in text, text
    assert printed(render_restart.raised_targets, again) == ""  # all ten done: nothing goes up


def test_a_dataset_the_job_lost_leaves_the_selection_said_with_the_way_back():
    """B4 out of hosts.yaml, deployed, then back: `its kept cap dropped … put back, it runs` while
    the kept --datasets B1,B4 had become B1 alone, and B4 never ran."""
    from remote.common.answers import RestartAnswer

    r = RestartAnswer(
        mode="start",
        host="c",
        caps={"B1": CapRow(cap=None)},
        kept=Caps(datasets=["B1"]),
        was=Caps(datasets=["B1", "B4"], caps={"B4": 3}),
    )
    text = " ".join(printed(render_restart.caps_dropped, r).split())
    assert "B4: its kept cap of 3 dropped" in text
    assert (
        "B4: no longer among the datasets run (--datasets): the deployed job has no B4 (put back, "
        "`--datasets B1,B4` runs it again)"
    ) in text
