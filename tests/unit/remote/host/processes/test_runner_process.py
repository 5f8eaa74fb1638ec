"""The runner's mechanism, the parts that need no runner: control requests numbered in turn, the caps
answer per dataset, and whether the runner's lock is free."""

from __future__ import annotations

import fcntl
import os

from remote.common.caps import Caps
from remote.common.jobspec import Paths
from remote.common.state import ControlRequest, kept_caps
from remote.common.status import DatasetStatus, JobStatus
from remote.host.processes.runner_process import (
    caps_summary,
    lock_is_free,
    prompts_replaced,
    send_control,
)


def test_control_requests_are_numbered_in_turn(tmp_path):
    paths = Paths(tmp_path)
    paths.ensure()
    assert send_control(paths, "tok", grace=5.0) == 1
    assert send_control(paths, "tok", drain=True) == 2
    last = ControlRequest.read(paths.control)
    assert (last.seq, last.token, last.drain) == (2, "tok", True)


def test_the_caps_answer_says_each_dataset_and_its_new_cap():
    st = JobStatus(state="running")
    st.datasets = {"B1": DatasetStatus(state="running", done=3, target=10, prompts=40)}
    rows = caps_summary(
        st, Caps(max_samples=24, caps={"B2": 5}), Caps(max_samples=40), ["B1", "B2"]
    )
    row = rows["B1"]
    assert (row.done, row.target, row.state, row.prompts, row.cap) == (3, 10, "running", 40, 24)
    assert row.changed and row.was == 40 and not row.raised
    # a dataset the status does not know yet (a dry run before its first run): its caps, no counts
    b2 = rows["B2"]
    assert (b2.cap, b2.was, b2.prompts, b2.changed, b2.raised) == (5, 40, 0, True, False)
    # a dataset a deploy took out of the job: in the last runner's status, in no row
    assert list(caps_summary(st, Caps(), Caps(), ["B2"])) == ["B2"]


def test_the_caps_rows_say_each_state_as_status_says_it_a_dry_runs_under_its_caps():
    """status's words, not the runner's: a dataset its budget stopped is `budget reached` (the
    runner's `complete` reads as every prompt answered); a dry run's states are what status would
    say under the caps it would run, a dataset at work `running`, not `pending`."""
    st = JobStatus(state="running")
    st.datasets = {
        "B1": DatasetStatus(
            "complete", 3, 10, 3, 40, completion_tokens=120, budget=100, budget_reached=True
        ),
        "B2": DatasetStatus("running", 3, 10, 3, 40, completion_tokens=90, in_flight=2, budget=100),
        "B3": DatasetStatus("pending", 0, 10, 0, 40, budget=100),
        "B4": DatasetStatus("complete", 10, 10, 10, 40, completion_tokens=80, budget=100),
    }
    caps = Caps(max_samples=10, max_tokens=100)
    states = {n: r.state for n, r in caps_summary(st, caps, caps).items()}
    assert states == {"B1": "budget reached", "B2": "running", "B3": "pending", "B4": "complete"}
    dry = caps_summary(st, Caps(max_samples=20, max_tokens=100), caps, (), {})
    assert {n: r.state for n, r in dry.items()} == states | {"B4": "pending"}
    unbudgeted = caps_summary(st, Caps(max_samples=10), caps, (), {})  # --max-tokens none
    assert unbudgeted["B1"].state == "pending" and unbudgeted["B2"].state == "running"
    # a job stopped: its datasets at work then say the job's `stopped`; the runner a restart
    # starts begins them, `pending` (a `--force --dry-run` said `stopped`, the restart `pending`)
    st.end("stopped", "stopped by deploytool")
    dry = caps_summary(st, caps, caps, (), {})
    assert dry["B2"].state == "pending" and dry["B4"].state == "complete"
    # a dry run lowering a complete dataset's cap says the records beyond it, as the run then
    # does (`--cap B1=5 --dry-run` said nothing, the restart `30 → 5: 25 beyond it`)
    st.datasets["B4"] = DatasetStatus("complete", 30, 30, 30, 40)
    dry = caps_summary(st, Caps(caps={"B4": 5}), Caps(), (), {})
    assert (dry["B4"].done, dry["B4"].target, dry["B4"].beyond) == (5, 5, 25)


def test_a_raise_over_a_replaced_prompt_file_says_the_new_files_prompts(tmp_path):
    """A file deployed under the job is reloaded by the restart: what it says ahead (the target
    goes up to ...) counts the new file, as the reload and the table after it do."""
    import io

    from rich.console import Console

    from deploytool.views.render_restart import raised_targets
    from remote.common.answers import RestartAnswer
    from remote.common.status import file_identity

    paths = Paths(tmp_path)
    prompts = tmp_path / "data" / "BIG.jsonl"
    prompts.parent.mkdir(parents=True)
    prompts.write_text('{"prompt": "a"}\n' * 768)
    st = JobStatus(state="running")
    used = dict(file_identity(os.stat(prompts)), path="data/BIG.jsonl")
    st.datasets = {"BIG": DatasetStatus("running", 400, 400, 400, 768, prompts_file=used)}
    assert prompts_replaced(paths, st) == {}
    with open(prompts, "a") as f:
        f.write('{"prompt": "b"}\n' * 100 + "\n")  # a blank line is no prompt
    replaced = prompts_replaced(paths, st)
    assert replaced == {"BIG": 868}
    rows = caps_summary(st, Caps(max_samples=1000), Caps(max_samples=400), (), replaced)
    assert (rows["BIG"].prompts, rows["BIG"].target, rows["BIG"].raised) == (868, 868, True)
    out = Console(file=io.StringIO(), width=200)
    raised_targets(RestartAnswer(host="gpu1", caps=rows), out)
    printed = out.file.getvalue()
    assert "BIG's target goes up (400 → 868 prompts: every prompt of the file)" in printed


def test_a_dry_run_counts_the_files_the_status_does_not_so_a_raise_stops_at_their_end(tmp_path):
    """A job last run in another stage (or a dataset added since): the status has no answers'
    counts of it, and `--max-samples 7000` over a file of 32 goes up to 32, every prompt; records
    there already that no status counts make its done a range."""
    import json

    from remote.host.processes import runner_process as rp

    paths = Paths(tmp_path)
    paths.ensure()
    job = {"datasets": {n: {"prompts": f"data/{n}.jsonl"} for n in ("B1", "B2", "B3")}}
    (tmp_path / "job.json").write_text(json.dumps(dict(job, engine={"kind": "simulate"})))
    for n in ("B1", "B2"):
        (tmp_path / "data" / f"{n}.jsonl").write_text('{"prompt": "a"}\n' * 32)
    paths.output("B1").write_text('{"id": "B1-000000"}\n')
    st = JobStatus(state="finished", stage="hidden-states")  # its rows are no answers
    st.datasets = {n: DatasetStatus("complete", 28, 28, 28, 28) for n in ("B1", "B2")}
    files = rp.uncounted(paths, st, Caps(max_samples=7000), tmp_path / "job.json")
    assert files == {"B1": (32, True), "B2": (32, False)}  # B3's file is not there: not known
    assert rp.uncounted(paths, st, Caps(stage="hidden-states"), tmp_path / "job.json") == {}
    names = ["B1", "B2", "B3"]
    rows = caps_summary(st, Caps(max_samples=7000), Caps(max_samples=28), names, {}, files)
    b1, b2, b3 = rows["B1"], rows["B2"], rows["B3"]
    assert (b1.prompts, b1.target, b1.done, b1.done_most, b1.state) == (32, 32, 0, 32, "?")
    assert (b2.prompts, b2.target, b2.done, b2.done_most, b2.state) == (32, 32, 0, None, "pending")
    assert b1.raised and b2.raised and (b3.prompts, b3.target, b3.state) == (0, 0, "")


def test_a_raise_is_a_dataset_that_gets_more_to_run():
    from remote.common.caps import CapRow

    assert CapRow(cap=None, was=20, prompts=400).raised  # `--max-samples all` after 20
    assert CapRow(cap=30, was=20, prompts=400).raised
    assert not CapRow(cap=30, was=20, prompts=10).raised  # the file had fewer than either
    assert not CapRow(cap=10, was=20, prompts=400).raised
    assert not CapRow(cap=20, was=None, prompts=400).raised  # lowered from every prompt
    assert CapRow(cap=20, was=20, was_selected=False).raised  # selected again
    assert not CapRow(cap=20, was=20, selected=False).raised


def test_the_lock_is_free_until_a_runner_holds_it(tmp_path):
    paths = Paths(tmp_path)
    assert lock_is_free(paths)
    fd = os.open(paths.lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # what a running runner holds
    try:
        assert not lock_is_free(paths)
    finally:
        os.close(fd)
    assert lock_is_free(paths)


def _live_runner():
    from remote.common import procinfo
    from remote.common.state import RunnerRecord

    me = os.getpid()  # stands in for the runner: a record of a live process
    return RunnerRecord(pid=me, start_time=procinfo.start_time(me), token="tok")


def test_a_re_cap_waits_for_a_slow_runner_and_gives_up_on_one_that_goes_on_without_it(tmp_path):
    """Judged by the runner's own turns (a status written each), never by the clock: a runner that
    writes nothing is slow and is waited for; one that writes RECAP_LOOKS and more without the
    request's number will not take it."""
    import threading
    import time

    import pytest

    from remote.common.wire import HostFault
    from remote.host.processes import runner_process as rp

    paths = Paths(tmp_path)
    paths.ensure()
    JobStatus(updated_at=1.0).write(paths.status)
    rec = _live_runner()

    def slow_then_takes():  # takes it once the caller has asked (control.json seq 1)
        while ControlRequest.read(paths.control) is None:
            time.sleep(0.01)
        JobStatus(updated_at=2.0, control_seq=1).write(paths.status)

    t = threading.Thread(target=slow_then_takes)
    t.start()
    assert rp.recap(paths, rec, Caps(max_samples=5), Caps()).control_seq == 1
    t.join()
    assert kept_caps(paths) == Caps(max_samples=5)  # kept before the runner was nudged

    def goes_on_without_it():
        for i in range(rp.RECAP_LOOKS + 1):  # each status written is read back before the next
            JobStatus(updated_at=10.0 + i, control_seq=1).write(paths.status)
            while 10.0 + i not in read and not done.is_set():
                time.sleep(0.005)

    read, done = [], threading.Event()
    real_read = JobStatus.read

    def read_and_note(path):
        st = real_read(path)
        read.append(st.updated_at if st else None)
        return st

    t = threading.Thread(target=goes_on_without_it, daemon=True)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(rp.JobStatus, "read", staticmethod(read_and_note))
        t.start()
        with pytest.raises(HostFault, match="did not take the new caps"):
            rp.recap(paths, rec, Caps(max_samples=9), Caps(max_samples=5))  # seq 2; it stays at 1
    done.set()
    t.join()
    assert kept_caps(paths) == Caps(max_samples=5)  # not taken: the caps are as they were


def test_a_restart_refuses_first_what_the_new_runner_would_refuse_and_nothing_more(tmp_path):
    """The host's check and the runner's are one comparison (JobSpec.settings): a changed model or
    sampling of a dataset with records is refused, unless --force; a dataset the caps leave out,
    one with no records yet, and the other stages are not the runner's to refuse."""
    import json

    import pytest

    from remote.common.jobspec import JobSpec
    from remote.common.wire import HostFault
    from remote.host.processes.runner_process import refuse_mixed_settings

    paths = Paths(tmp_path)
    paths.ensure()
    job = {
        "datasets": {n: {"prompts": f"data/{n}.jsonl"} for n in ("B1", "B2")},
        "engine": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m2"},
        "sampling": {"temperature": 0.7},
    }
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job))
    spec = JobSpec.load(job_file)
    made = spec.settings(spec.datasets[0])
    for name in ("B1", "B2"):  # B1 made by model m1; B2 as the job says
        then = dict(made, model="m1") if name == "B1" else made
        paths.meta(name).write_text(json.dumps(then))
        paths.output(name).write_text('{"id": "x"}\n')

    with pytest.raises(HostFault) as e:
        refuse_mixed_settings(paths, Caps(), False, job_file)
    assert e.value.fault.code == "settings"
    assert e.value.fault.message.startswith(
        'B1: its records were made with different model (model "m1" → "m2")'
    )
    forced = refuse_mixed_settings(paths, Caps(), True, job_file)  # --force mixes them: said
    assert forced.startswith('B1: its records were made with different model (model "m1" → "m2")')
    assert refuse_mixed_settings(paths, Caps(datasets=["B2"]), True, job_file) is None
    refuse_mixed_settings(paths, Caps(datasets=["B2"]), False, job_file)  # B1 is not run
    refuse_mixed_settings(paths, Caps(stage="hidden-states"), False, job_file)
    paths.output("B1").write_text("")  # no record made yet: the runner records the new settings
    refuse_mixed_settings(paths, Caps(), False, job_file)
    paths.output("B1").write_text('{"id": "x", "torn')  # a kill mid-write: the runner cuts it
    refuse_mixed_settings(paths, Caps(), False, job_file)
    # answers in flight for it: the running runner's stop may write their records in its grace
    with pytest.raises(HostFault, match="^B1: its records"):
        refuse_mixed_settings(paths, Caps(), False, job_file, answering=frozenset({"B1"}))


def test_a_restart_reads_what_is_in_flight_from_a_status_written_after_it_was_typed(tmp_path):
    """status.json is written each second: a restart typed just after another read a runner's
    first status (nothing in flight yet), stopped it, and its grace wrote B1's first records with
    the forced settings; the start after it was refused. Where in-flight answers could change the
    verdict, a status written after the restart began is waited for (an event, not a delay)."""
    import json
    import threading
    import time

    import pytest

    from remote.common.jobspec import JobSpec
    from remote.host.facts.made_with import mixed_settings
    from remote.host.processes import runner_process as rp

    paths = Paths(tmp_path)
    paths.ensure()
    job = {
        "datasets": {n: {"prompts": f"data/{n}.jsonl"} for n in ("B1", "B2")},
        "engine": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m2"},
    }
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job))
    spec = JobSpec.load(job_file)
    made = spec.settings(spec.datasets[0])
    paths.meta("B1").write_text(json.dumps(dict(made, model="m1")))  # none made yet, with m1
    paths.meta("B2").write_text(json.dumps(made))
    rec = _live_runner()
    first = JobStatus(pid=rec.pid, updated_at=time.time() - 0.5)  # nothing in flight yet
    first.write(paths.status)
    looked = []
    real_read = JobStatus.read

    def read_and_note(path):
        looked.append(path)
        return real_read(path)

    def runner_writes_its_next():  # once the restart has looked at the status again
        while not looked:
            time.sleep(0.005)
        busy = {"B1": DatasetStatus(in_flight=3), "B2": DatasetStatus(in_flight=1)}
        JobStatus(pid=rec.pid, updated_at=time.time() + 1, datasets=busy).write(paths.status)

    t = threading.Thread(target=runner_writes_its_next)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(rp.JobStatus, "read", staticmethod(read_and_note))
        t.start()
        st, answering = rp._answering_now(paths, Caps(), first, rec, job_file)
    t.join()
    assert answering == {"B1", "B2"} and st.datasets["B1"].in_flight == 3
    assert list(mixed_settings(paths, Caps(), job_file, answering)) == ["B1"]
    # nothing it could be in flight for would change the verdict: the status at hand is kept
    paths.meta("B1").write_text(json.dumps(made))
    looked.clear()
    assert rp._answering_now(paths, Caps(), first, rec, job_file) == (first, frozenset())
    assert not looked


def test_a_refusal_names_every_dataset_it_would_mix_those_changed_alike_together(tmp_path):
    import json

    import pytest

    from remote.common.jobspec import JobSpec
    from remote.common.wire import HostFault
    from remote.host.processes.runner_process import refuse_mixed_settings

    paths = Paths(tmp_path)
    paths.ensure()
    names = ("B1", "B2", "B3", "B4")
    job = {
        "datasets": {n: {"prompts": f"data/{n}.jsonl"} for n in names},
        "engine": {"kind": "simulate"},
        "sampling": {"temperature": 0.7},
    }
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job))
    spec = JobSpec.load(job_file)
    for n in names:
        then = dict(spec.settings(spec.datasets[0]), sampling={"temperature": 1.0})
        if n == "B3":
            then = dict(then, model="m1")
        paths.meta(n).write_text(json.dumps(then))
        paths.output(n).write_text('{"id": "x"}\n' if n != "B4" else "")
    with pytest.raises(HostFault) as e:
        refuse_mixed_settings(paths, Caps(), False, job_file)
    assert e.value.fault.message == (
        "B1, B2: their records were made with different sampling (sampling.temperature 1.0 → "
        "0.7); B3: its records were made with different sampling, model (sampling.temperature "
        '1.0 → 0.7; model "m1" → "simulated"): a new runner would refuse to mix them; nothing was '
        "stopped or started"
    )


def test_what_changed_is_said_down_to_each_value_as_json_has_it():
    from remote.common.jobspec import changes_text, settings_changed

    then = {"sampling": {"temperature": 1.0, "top_p": None}, "turns": "last", "extra_body": {}}
    now = {
        "sampling": {"temperature": "0.7", "top_p": 0.9},
        "turns": "all",
        "extra_body": {"rd": {"min_count": 4}},
    }
    assert changes_text(settings_changed(then, now)) == (
        'sampling.temperature 1.0 → "0.7"; sampling.top_p (unset) → 0.9; turns "last" → "all"; '
        'extra_body.rd (unset) → {"min_count": 4}'
    )


def test_a_stop_says_what_it_found_where_not_the_runner_a_command_started(tmp_path):
    """Found nothing: the last runner's end (someone's signal, a kill -9); found the watcher's
    runner: the death it was started again after; found one stopping: the signal not ours."""
    import time

    from remote.common import procinfo
    from remote.common.answers import RecoverEvent
    from remote.common.codec import note_line
    from remote.common.state import RunnerRecord
    from remote.host.processes.runner_process import found_runner

    paths = Paths(tmp_path)
    paths.ensure()
    foreign = "stopped by SIGTERM, not by deploytool (someone's kill, a shutdown)"
    JobStatus(state="stopped", pid=41, message=foreign).write(paths.status)
    assert found_runner(paths, None, JobStatus()) == f"the last one, pid 41: {foreign}"
    JobStatus(state="running", pid=41).write(paths.status)  # gone without its verdict
    found = found_runner(paths, None, JobStatus())
    assert found == "the last one, pid 41: the runner is gone without writing its status (killed?)"
    me = os.getpid()
    rec = RunnerRecord(pid=me, start_time=procinfo.start_time(me), started_at=time.time())
    died = f"the runner (pid 41) {foreign}"
    note_line(paths.recover_log, RecoverEvent(rec.started_at - 60, "runner", "restarted", "old"))
    assert found_runner(paths, rec, JobStatus()) is None  # a command started this one
    note_line(paths.recover_log, RecoverEvent(rec.started_at + 0.1, "runner", "restarted", died))
    assert (
        found_runner(paths, rec, JobStatus()) == f"the watcher had started it again after: {died}"
    )
    stopping = JobStatus(state="running", pid=me, signalled="SIGTERM")
    found = found_runner(paths, rec, stopping)
    assert found == "it was stopping already, after a SIGTERM not of deploytool's"


def test_a_dry_runs_done_under_a_moved_target_is_what_the_runner_will_count():
    """20 of 20 done, cap lowered to 5: 5 done, as the real restart says (not 20 of 5); a cap raised
    again over records beyond it: as many as the counts tell, a range where they cannot."""
    st = JobStatus(state="finished")
    st.datasets = {
        "B1": DatasetStatus(state="complete", done=20, target=20, records=20, prompts=32)
    }
    row = caps_summary(st, Caps(caps={"B1": 5}), Caps(max_samples=20), (), {})["B1"]
    assert (row.done, row.done_most, row.target) == (5, None, 5)
    st.datasets["B1"] = DatasetStatus(state="complete", done=5, target=5, records=20, prompts=32)
    row = caps_summary(st, Caps(caps={"B1": 20}), Caps(caps={"B1": 5}), (), {})["B1"]
    assert (row.done, row.done_most, row.target) == (5, 20, 20)
    st.datasets["B1"] = DatasetStatus(state="complete", done=5, target=5, records=5, prompts=32)
    row = caps_summary(st, Caps(caps={"B1": 20}), Caps(caps={"B1": 5}), (), {})["B1"]
    assert (row.done, row.done_most, row.target) == (5, None, 20)  # none beyond: exact
    st.datasets["B1"] = DatasetStatus(state="running", done=12, target=20, records=12, prompts=32)
    row = caps_summary(st, Caps(caps={"B1": 5}), Caps(max_samples=20), (), {})["B1"]
    assert (row.done, row.done_most, row.target) == (0, 5, 5)  # which 12 of the 20: not known


def test_the_trainer_a_killed_runner_left_is_allowed_its_gpu_memory_by_pid_and_start_time(tmp_path):
    import json
    import subprocess
    import sys

    from remote.common import procinfo
    from remote.common.jobspec import Paths
    from remote.host.processes.runner_process import trainer_pids

    paths = Paths(tmp_path)
    paths.ensure()
    assert trainer_pids(paths) == set()  # none recorded
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        rec = {"pid": child.pid, "start_time": procinfo.start_time(child.pid)}
        paths.trainer.write_text(json.dumps(rec))
        assert child.pid in trainer_pids(paths)
        # the same pid, another process (another start time): a stranger's
        paths.trainer.write_text(json.dumps(dict(rec, start_time=rec["start_time"] - 1)))
        assert trainer_pids(paths) == set()
    finally:
        child.kill()
        child.wait()
    paths.trainer.write_text(json.dumps(rec))
    assert trainer_pids(paths) == set()  # gone


def test_a_cap_of_a_dataset_the_job_no_longer_has_is_dropped_and_one_named_refused(tmp_path):
    """A rollback (or a deploy) took B9 out of the job: its kept cap would make the runner refuse
    the start, and no flag could clear it; a flag that names B9 is still refused."""
    import json

    import pytest

    from remote.common.protocol import RunArgs
    from remote.common.wire import HostFault
    from remote.host.facts.intent import keep_caps
    from remote.host.processes.runner_process import caps_change

    paths = Paths(tmp_path)
    paths.ensure()
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps({"datasets": {"B1": {"prompts": "data/B1.jsonl"}}}))
    keep_caps(paths, Caps(max_samples=300, caps={"B1": 5, "B9": 350}, datasets=["B1", "B9"]))
    was, caps = caps_change(paths, RunArgs(), job_file)
    assert was.caps == {"B1": 5, "B9": 350}
    assert (caps.caps, caps.datasets, caps.max_samples) == ({"B1": 5}, ["B1"], 300)
    with pytest.raises(HostFault, match="unknown dataset B9"):
        caps_change(paths, RunArgs(cap=(("B9", 5),)), job_file)
    # every dataset it ran taken out: it ran nothing and said `finished` (an empty --datasets
    # typed is refused; this one is too, until the selection is said again)
    keep_caps(paths, Caps(datasets=["B9"]))
    with pytest.raises(HostFault, match=r"--datasets B9, kept\) are none of the deployed job's"):
        caps_change(paths, RunArgs(), job_file)
    assert caps_change(paths, RunArgs(datasets="all"), job_file)[1].datasets is None


def test_a_refusal_after_a_restarts_stop_never_says_nothing_was_stopped(tmp_path):
    """A caps-only restart whose check before the stop saw no record of the running runner's
    settings: its grace wrote some, the start refused them, and the answer said `nothing was
    stopped or started` of a job it had stopped."""
    import json

    import pytest

    from remote.common.jobspec import JobSpec
    from remote.common.wire import HostFault
    from remote.host.processes.runner_process import refuse_mixed_settings

    paths = Paths(tmp_path)
    paths.ensure()
    job = {
        "datasets": {"B1": {"prompts": "data/B1.jsonl"}},
        "engine": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m2"},
    }
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job))
    spec = JobSpec.load(job_file)
    paths.meta("B1").write_text(json.dumps(dict(spec.settings(spec.datasets[0]), model="m1")))
    paths.output("B1").write_text('{"id": "x"}\n')
    with pytest.raises(HostFault, match="nothing was stopped or started"):
        refuse_mixed_settings(paths, Caps(), False, job_file)
    with pytest.raises(HostFault) as e:
        refuse_mixed_settings(paths, Caps(), False, job_file, stopped=True)
    assert "the runner was stopped" in str(e.value.fault.message)
    assert "nothing was stopped" not in str(e.value.fault.message)
