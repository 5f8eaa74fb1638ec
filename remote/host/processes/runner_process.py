"""The runner as a process: start it detached, stop it, re-cap it live. What the `ctl` commands and
the watcher both use; it records no intent and starts no watcher (the commands do, above it).

Never by name: a runner is found by its pid file (pid + start time + job token) or, for one started
by hand, by its command line *and* a working directory or --root inside this remote_dir.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time
from pathlib import Path

from ...common import procinfo
from ...common.answers import RecoverEvent, RestartAnswer, StopAnswer
from ...common.caps import CapRow, Caps
from ...common.codec import read_json, typed_lines, write_json
from ...common.jobspec import (
    JOB_FILE,
    JOB_TOKEN_ENV,
    WATCHER_MARK,
    Paths,
    dataset_changes_text,
    deployed_spec,
    release_dir,
    rollback_to,
)
from ...common.protocol import KILL_AFTER_GRACE_S, CtlRestart, CtlStart, CtlStop, RunArgs
from ...common.stages import stage_of
from ...common.state import (
    ControlRequest,
    RunnerRecord,
    job_now,
    kept_caps,
    line_ids_moved,
    lock_held,
    moved_text,
    settle,
)
from ...common.status import (
    JobState,
    JobStatus,
    count_prompts,
    file_identity,
    planned_state,
)
from ...common.wire import HostFault
from ..facts import gpu, intent, kill
from ..facts.made_with import has_records, mixed_settings, release_made_with
from ..facts.strays import managed_runner, stray_runners
from . import server_process

# ------------------------------------------------------------------ finding our processes


def send_control(paths: Paths, token: str | None, **request) -> int:
    """Ask the running runner something through run/control.json; returns the request's seq."""
    last = ControlRequest.read(paths.control)
    seq = (last.seq if last else 0) + 1
    ControlRequest(seq=seq, token=token, **request).write(paths.control)
    return seq


def caps_summary(
    st: JobStatus,
    caps: Caps,
    was: Caps,
    names=(),
    replaced: dict[str, int] | None = None,
    files: dict[str, tuple[int, bool]] | None = None,
) -> dict[str, CapRow]:
    """Per dataset of the job's `names` (the runner's first; no names: the runner's): where it stands, its cap
    now and before. A dataset the status does not know yet (a dry run), or knows in another stage
    (rows of hidden states are no answers), has its counts at 0: not known, but for its file's
    prompts where `files` counted them (`uncounted`). `replaced` (a dry run's, where a file will
    be reloaded: {} where none): the answers' targets as the caps and files will make them, the
    records counted in them as far as the status tells."""
    rows = {}
    same_stage = st.stage == caps.stage
    # the job's datasets: one a deploy took out is in the status of the runner before, not the job
    known = [n for n in st.datasets if not names or n in names]
    for n in known + [n for n in names if n not in st.datasets]:
        d = st.datasets.get(n) if same_stage else None
        cap, selected = caps.target(n), caps.selected(n)
        row = CapRow(cap=cap, was=was.target(n), selected=selected, was_selected=was.selected(n))
        counted = (files or {}).get(n) if d is None else None
        if counted:  # a cap past the file reaches its last prompt, said so, not the cap
            row.prompts = counted[0]
        if same_stage and st.datasets:  # what the last runner of this stage had: 0 where none
            row.was_target = d.target if d is not None else 0
        if d is not None:
            # its state in status's words (`budget reached`, not the runner's `complete`)
            row.done, row.target, row.state, row.prompts = (
                d.done,
                d.target,
                d.state_label,
                d.prompts,
            )
            if replaced is None:  # the runner's own counts, under these caps (no dry run's)
                row.beyond, row.in_flight_beyond = d.beyond, d.in_flight_beyond
        if replaced and n in replaced:
            row.prompts = replaced[n]
        target = row.prompts if cap is None else min(cap, row.prompts)
        answers = d is not None and stage_of(caps.stage).makes_answers  # what records are of
        if replaced is not None and selected and row.prompts and target != row.target:
            if answers:
                row.moved(target, d.records)
            elif counted and counted[1]:  # records no status of this stage counts: 0 to all
                row.done_most = target
            row.target = target
        elif replaced and n in replaced and selected and answers and d.records:
            # the same target over a file deployed since: its first prompts may be others now
            # (lines cut at its top), so the status's count may not hold (the runner counts anew)
            row.done, row.done_most = 0, min(d.records, target)
        if replaced is not None and answers and selected and row.done_most is None:
            row.beyond = max(0, d.records - row.done)  # as the run will count them: said alike
        if replaced is not None:
            row.state = planned_state(row, d, caps)
        rows[n] = row
    return rows


def uncounted(
    paths: Paths, st: JobStatus, caps: Caps, job: Path | None = None
) -> dict[str, tuple[int, bool]]:
    """The answers' datasets of the deployed job that the status does not count (a job last run
    in another stage, a dataset added since): each one's prompts in its file, and whether it has
    records there already; a dry run's targets then stop at the file's end, as the runner's will."""
    spec = deployed_spec(job)
    if spec is None or not stage_of(caps.stage).makes_answers:
        return {}
    known = st.datasets if st.stage == caps.stage else {}
    out = {}
    for ds in spec.datasets:
        if ds.name in known:
            continue
        try:
            out[ds.name] = (
                count_prompts(paths.root / ds.prompts),
                has_records(paths.output(ds.name)),
            )
        except OSError:
            continue  # not deployed yet: not known, as before a first run
    return out


def prompts_replaced(paths: Paths, st: JobStatus) -> dict[str, int]:
    """The prompt files the running runner reads that were replaced since it opened them (a
    deploy), with their prompts now: a restart with the same caps still has those to reload."""
    out = {}
    for name, d in st.datasets.items():
        used = d.prompts_file
        try:
            path = paths.root / used["path"]
            now = file_identity(os.stat(path))
            if now != {k: used.get(k) for k in now}:
                out[name] = count_prompts(path)
        except (KeyError, OSError):
            continue  # none known, or gone: the runner keeps reading the file it has open
    return out


def refuse_mixed_settings(
    paths: Paths,
    caps: Caps,
    force: bool,
    job: Path | None = None,
    answering=frozenset(),
    stopped: bool = False,
) -> str | None:
    """What a new runner refuses as it starts, refused before anything is stopped or started,
    naming every dataset it would refuse (the first alone would hide the rest until the next try).
    With `force`, what it mixes instead, said per dataset (None: nothing): the answer says it. A
    prompt file rewritten under records that name their prompts by line number is refused,
    `force` or not: no flag makes those ids name the prompts they were made from."""
    spec = deployed_spec(job)
    asks = stage_of(caps.stage).makes_answers  # a stage that asks the prompts for answers
    moved = [
        ds
        for ds in (spec.datasets if spec and asks else ())
        if caps.selected(ds.name) and line_ids_moved(paths, ds.name, paths.root / ds.prompts)
    ]
    if moved:
        names, files = [ds.name for ds in moved], [ds.prompts for ds in moved]
        raise HostFault("bad_config", moved_text(names, files))
    mixed = mixed_settings(paths, caps, job, answering)
    if mixed and force:
        return dataset_changes_text(mixed)
    if mixed:
        back = rollback_to(release_made_with(paths, caps, list(mixed)))
        # `stopped`: a restart's stop came first, its grace writing answers the check before it
        # did not see; said so, never "nothing was stopped"
        done = (
            "the runner was stopped (its answers in flight were written as it stopped), none "
            "started"
            if stopped
            else "nothing was stopped or started"
        )
        raise HostFault(
            "settings",
            f"{dataset_changes_text(mixed)}: a new runner would refuse to mix them; {done}",
            fix=f"deploy the settings they were made with again (restore them in hosts.yaml and "
            f"`invoke deploy`{back}), move their data/outputs/<DS>.jsonl aside, or restart with "
            "--force to mix them (the runner resumes them with the new settings)",
        )
    return None


def job_datasets(job: Path | None = None) -> list[str]:
    spec = deployed_spec(job)
    return spec.dataset_names() if spec else []


def caps_change(paths: Paths, flags: RunArgs, job: Path | None = None) -> tuple[Caps, Caps]:
    """The job's caps, and what `flags` make of them; nothing written. A dataset named that the
    job (`job`: its spec, default the current release's) lacks is bad input, refused before
    anything is stopped or kept; one only the kept caps name (a rollback, or a deploy, took it out
    of the job) keeps no cap: the job's runner would refuse it, and no flag could clear it."""
    was = kept_caps(paths)
    known = job_datasets(job)
    unknown = [n for n in flags.named_datasets() if known and n not in known]
    if unknown:
        raise HostFault(
            "unknown_dataset",
            f"unknown dataset {', '.join(unknown)}: the deployed job has {', '.join(known)}",
            fix="deploy the hosts.yaml that has it first: `invoke deploy`",
            unknown=unknown,
        )
    caps = flags.applied_to(was)
    caps = caps.only(known) if known else caps
    if caps.datasets == [] and stage_of(caps.stage).makes_answers:  # every one it ran taken out
        raise HostFault(
            "unknown_dataset",
            f"the datasets this job runs (--datasets {','.join(was.datasets or [])}, kept) are none "
            f"of the deployed job's ({', '.join(known)}); nothing was stopped or started",
            fix="say which run: `invoke restart --datasets all` (or their names)",
        )
    return was, caps


# ------------------------------------------------------------------ stopping


def found_runner(paths: Paths, rec: RunnerRecord | None, st: JobStatus) -> str | None:
    """What a stop finds, where it is not the runner a command started, running as asked: said
    so, or the user takes the end for their stop's."""
    if rec is None:
        ended = job_now(paths)
        if ended.pid is None or not ended.terminal:
            return None
        how = ended.message if ended.state == JobState.STOPPED else ended.state
        if ended.state != JobState.STOPPED and ended.message:
            how += f": {ended.message}"
        return f"the last one, pid {ended.pid}: {how or ended.state}"
    if st.pid == rec.pid and st.signalled:
        return f"it was stopping already, after a {st.signalled} not of deploytool's"
    after = [
        e.why
        for e in typed_lines(paths.recover_log, RecoverEvent)
        if e.what == "runner" and e.event == "restarted" and e.at >= rec.started_at
    ]
    return f"the watcher had started it again after: {after[-1]}" if after else None


CUT = {  # what a stop typed over another command's cuts short: how each side says it
    "drain": ("the drain under way (another command's) was cut short", "drained"),
    "restart": (
        "the restart under way (another command's) was cut short: it starts no runner",
        "stopped the runner",
    ),
    "stop": ("the stop under way (another command's) was cut to this one's grace", "stopped"),
}


def stop_over_drain(paths: Paths, req: CtlStop) -> RunnerRecord | None:
    """A stop typed while another command's drain, a restart's stop, or a stop of a longer grace
    holds the job (the host carries out one command at a time: a drain waits for every answer in
    flight, minutes of them, and a restart would start a runner for this stop to stop again): the
    runner is given this stop's grace now, as a stop of its own would give it, and a restart under
    way starts no runner after it (`stop_typed_since`). The runner it stopped; None where none
    of those was."""
    if req.drain or not intent.busy(paths):
        return None
    rec = managed_runner(paths)
    st = JobStatus.read(paths.status)
    if rec is None or st is None or st.pid != rec.pid or st.terminal:
        return None
    restarting = st.stopping is not None and intent.restarting(paths, intent.read(paths))
    shorter = st.stopping is not None and req.grace < st.stopping  # another stop's, cut to this
    if not (st.draining or restarting or shorter):
        return None
    cut = "drain" if st.draining else "restart" if restarting else "stop"
    write_json(paths.stop_asked, {"at": time.time(), "cut": cut})
    send_control(paths, rec.token, grace=req.grace)
    kill.signal_if_same(rec.pid, rec.start_time, signal.SIGTERM, group=False)
    return rec


def _cut(paths: Paths) -> tuple[str, str]:
    return CUT.get((read_json(paths.stop_asked) or {}).get("cut"), CUT["drain"])


def stopped_over_drain(paths: Paths, rec: RunnerRecord, out: StopAnswer) -> StopAnswer:
    """The answer of a stop that cut another command's short: the runner is its to say stopped
    (gone before this stop held the job, it read `no runner was running`), and what it cut off."""
    st = JobStatus.read(paths.status) or JobStatus()
    said = _cut(paths)[0]
    if not out.was_running:
        out.was_running, out.stopped, out.found = True, [rec.pid], None
        out.lost_in_flight = st.abandoned if st.pid == rec.pid else out.lost_in_flight
    out.found = f"{out.found}; {said}" if out.found else said
    return out


def stop_typed_since(paths: Paths, t: float) -> bool:
    """A stop was typed over a drain or a restart's stop since `t` (`stop_over_drain`)."""
    at = (read_json(paths.stop_asked) or {}).get("at")
    return isinstance(at, (int, float)) and at >= t


def _restarts_stop(paths: Paths, req: CtlRestart) -> StopAnswer:
    """A restart's stop of the runner; a stop typed over its drain or its grace
    (`stop_over_drain`) ends the restart there: no runner is started after it."""
    began = time.time()
    stopped = stop(paths, CtlStop(req.grace, req.drain, req.drain_timeout))
    if stop_typed_since(paths, began):
        raise HostFault(
            "cancelled",
            f"the runner was stopped, none started: a stop was typed while this restart "
            f"{_cut(paths)[1]} (`invoke restart` starts it)",
        )
    return stopped


def stop(paths: Paths, req: CtlStop) -> StopAnswer:
    rec = managed_runner(paths)
    targets: dict[int, int | None] = {rec.pid: rec.start_time} if rec else {}
    token = rec.token if rec else None
    strays = stray_runners(paths, set(targets))
    targets.update({pid: procinfo.start_time(pid) for pid in strays})
    before = JobStatus.read(paths.status) or JobStatus()
    found = found_runner(paths, rec, before)
    if not targets:
        return StopAnswer(was_running=False, found=found)
    in_flight_before = before.in_flight
    drained = False
    if req.drain and rec:
        began = time.time()
        send_control(paths, token, drain=True)
        drained = not kill.wait_gone({rec.pid: rec.start_time}, req.drain_timeout)
        if stop_typed_since(paths, began):  # said on this side too, not a drain that ended
            cut = "its drain was cut short by a stop typed meanwhile"
            found = f"{found}; {cut}" if found else cut
    if rec:
        # the runner itself lets in-flight work finish for `grace`, then writes its final status;
        # our SIGKILL comes a little later, only for a runner that does not stop by itself
        send_control(paths, token, grace=req.grace)
    wait = req.grace + (KILL_AFTER_GRACE_S if rec else 0.0)
    killed = kill.terminate(targets, wait, JOB_TOKEN_ENV, token)
    after = JobStatus.read(paths.status) or JobStatus()
    verdict = after.pid == (rec.pid if rec else None) and after.terminal
    if rec and not verdict:
        # gone before its verdict (our SIGKILL past the grace, or another hand's kill -9, in a
        # drain too): what it had in flight at its last status was cut off
        lost = after.in_flight or in_flight_before
        if rec.pid in killed:
            settle(paths, JobState.STOPPED, f"killed after {req.grace:g}s grace", runner=rec.pid)
        else:
            gone = "it ended without its verdict, not by this stop's hand (killed -9?)"
            found = f"{found}; {gone}" if found else gone
    else:
        lost = after.abandoned
    # a drain another stop cut short (`stop_over_drain`) is no drain: what it cut off is said
    drained = drained and verdict and not lost
    return StopAnswer(
        stopped=sorted(targets),
        killed=killed,
        strays=strays,
        lost_in_flight=0 if drained else lost,
        was_running=True,
        drained=drained,
        found=found,
    )


# ------------------------------------------------------------------ starting


def trainer_pids(paths: Paths) -> set[int]:
    """The train stage's trainer a runner killed before left (it ends on its own, and the new
    runner waits for it): its GPU memory is no stranger's. Found by pid and start time."""
    rec = read_json(paths.trainer) or {}
    pid = rec.get("pid")
    if not isinstance(pid, int) or procinfo.start_time(pid) != rec.get("start_time"):
        return set()
    return procinfo.descendants({pid}) if procinfo.alive(pid) else set()


def lock_is_free(paths: Paths) -> bool:
    paths.ensure()
    return not lock_held(paths.lock)


def start(
    paths: Paths, req: CtlStart, rel: Path | None = None, stopped: bool = False
) -> RestartAnswer:
    """Start the runner detached from `rel` (this release) and wait until it reports running;
    `stopped`: a restart stopped the runner before it (its refusal says so)."""
    if not lock_is_free(paths) or managed_runner(paths):
        rec = managed_runner(paths)
        raise HostFault(
            "busy",
            f"a runner is already running in {paths.root} (pid {rec.pid if rec else '?'})",
            fix="use restart",
        )
    rel = rel or release_dir()
    was, caps = caps_change(paths, req, rel / JOB_FILE)
    forced = refuse_mixed_settings(paths, caps, req.force, rel / JOB_FILE, stopped=stopped)
    allowed = server_process.allowed_pids(paths, job_engine_port()) | trainer_pids(paths)
    gpu_report = gpu.check(allowed, force=req.force_gpu)
    token = secrets.token_hex(12)
    env = dict(os.environ, **{JOB_TOKEN_ENV: token, "PYTHONUNBUFFERED": "1"})
    env.pop("DEPLOYTOOL_WATCH_TOKEN", None)  # started by the watcher: stopping it must not stop us
    if caps != was:
        intent.keep_caps(paths, caps)  # the runner reads them as it starts
    argv = [sys.executable, "-m", "remote", "run", "--root", str(paths.root)]
    argv += req.own_flags().argv()
    paths.ensure()
    with open(paths.log, "ab") as log:
        began = log.tell()  # its own lines from here: a failure shows none of the runner before
        proc = procinfo.start_detached(argv, cwd=rel, env=env, log=log)
    try:
        st = _wait_running(paths, req, proc, token, began)
    except HostFault:
        if caps != was and proc.poll() is not None:
            intent.keep_caps(paths, was)  # a start that failed leaves the caps as they were
        raise
    return RestartAnswer(
        mode="start",
        pid=proc.pid,
        token=token,
        release=str(rel),
        state=st.state,
        caps=caps_summary(st, caps, was, job_datasets(rel / JOB_FILE)),  # those not run too
        gpu=gpu_report,
        kept=caps,
        was=was,
        forced_mix=forced,
    )


def _wait_running(paths: Paths, req: CtlStart, proc, token: str, began: int = 0) -> JobStatus:
    deadline = time.monotonic() + req.wait
    while True:
        st = JobStatus.read(paths.status) or JobStatus()
        if st.token == token and st.state in (
            JobState.RUNNING,
            JobState.FINISHED,
            JobState.STOPPED,
        ):
            return st
        code = proc.poll()
        if code is not None or time.monotonic() > deadline:
            if code is None:
                why = f"the runner did not report running within {req.wait:g}s"
            elif code < 0:
                why = f"the runner was killed (signal {-code}) during start-up"
            else:
                why = f"the runner exited with code {code} during start-up"
            log = procinfo.tail_lines(paths.log, 20, without=WATCHER_MARK, since=began)
            fix = "its lines above (`invoke tail --log` for more); `invoke restart` starts it again"
            raise HostFault("start_failed", why, fix=fix, log=log)
        time.sleep(0.05)


def job_engine_port() -> int | None:
    job = deployed_spec()
    if job is None or job.engine.kind != "openai":
        return None
    from urllib.parse import urlparse

    return urlparse(job.engine.base_url).port


# ------------------------------------------------------------------ restart: live re-cap or real


# the runner looks for a request before each status.json it writes (every second): one that has
# written this many since, without taking it, will not; one that writes none is only slow (a busy
# host), and is waited for up to the ceiling
RECAP_LOOKS = 5
RECAP_CEILING_S = 300.0


def recap(paths: Paths, rec: RunnerRecord, caps: Caps, was: Caps) -> JobStatus | None:
    """New caps for the running runner (or its own again, with a prompt file to reload): kept
    where they change, then the runner is nudged to read them again. Its status once it took them;
    None when it ended before (the caps are as they were, for a start); a refusal leaves them as
    they were too."""

    def as_they_were():
        if caps != was:
            intent.keep_caps(paths, was)

    if caps != was:
        intent.keep_caps(paths, caps)
    seq = send_control(paths, rec.token, recap=True)
    deadline = time.monotonic() + RECAP_CEILING_S
    written: set = set()  # the status.json writes seen since the request
    while time.monotonic() < deadline and len(written) <= RECAP_LOOKS:
        st = JobStatus.read(paths.status) or JobStatus()
        if st.control_seq >= seq:
            if st.control_error:
                as_they_were()
                raise HostFault("refused", f"the running runner refused: {st.control_error}")
            return st
        if not rec.alive():
            as_they_were()
            return None
        written.add(st.updated_at)
        time.sleep(0.05)
    as_they_were()
    raise HostFault(
        "refused",
        "the running runner did not take the new caps (see logs/runner.log)",
        fix="use --hard to restart it",
        log=procinfo.tail_lines(paths.log, 20, without=WATCHER_MARK),
    )


def _answering(st: JobStatus, rec: RunnerRecord | None) -> frozenset:
    """The datasets the running runner has answers in flight for (its status, if it is its)."""
    return st.answering(rec.pid if rec else None)


STATUS_WRITE_WAIT_S = 3.0  # the runner writes status.json each second


def _answering_now(
    paths: Paths, caps: Caps, st: JobStatus, rec: RunnerRecord | None, job: Path | None = None
) -> tuple[JobStatus, frozenset]:
    """The running runner's status and the datasets it has answers in flight for, whose records
    its stop's grace may write with its own settings. status.json is up to a second old: a
    dataset whose first answers went out since reads as none in flight (a restart typed just
    after another mixed the settings after its stop). Where that could change the verdict, a
    status written after now is waited for."""
    answering = _answering(st, rec)
    if rec is None or not rec.alive():
        return st, answering
    every = frozenset(job_datasets(job))
    if mixed_settings(paths, caps, job, every) == mixed_settings(paths, caps, job, answering):
        return st, answering
    since, deadline = time.time(), time.monotonic() + STATUS_WRITE_WAIT_S
    while time.monotonic() < deadline and rec.alive():
        fresh = JobStatus.read(paths.status)
        if fresh is not None and (fresh.pid != rec.pid or fresh.updated_at > since):
            return fresh, _answering(fresh, rec)
        time.sleep(0.05)
    return st, answering


def _recap_instead(rec: RunnerRecord | None, req: CtlRestart, caps: Caps, was: Caps) -> bool:
    """A change of caps alone, for a runner running (of another release: a deploy since) what a new
    one would refuse to start with: given to that runner live instead. A bare restart, --hard, or
    one of another stage asks for a new runner, and is refused."""
    same_stage = caps.stage == was.stage and stage_of(caps.stage).live_recap
    return rec is not None and caps != was and same_stage and not req.hard


def _takes_live(
    st: JobStatus, rec: RunnerRecord | None, req: CtlRestart, caps: Caps, was: Caps
) -> bool:
    """The running runner takes the change live: of this release, of the same stage (another
    stage is another runner; a re-cap of the draft stage's held-out prompts, which follow the
    caps, starts it again on the new ones), and not ending (draining, or in a stop's grace: a dry
    run during another command's drain said `re-cap live`, the restart after it started one)."""
    same_release = rec is not None and Path(rec.release or "").resolve() == release_dir()
    ending = rec is not None and st.pid == rec.pid and not st.terminal
    ending = ending and (st.draining or st.stopping is not None)
    live = same_release and not req.hard and caps.stage == was.stage and not ending
    return live and (stage_of(caps.stage).live_recap or caps == was)


def restart(paths: Paths, req: CtlRestart, stopping=lambda: None) -> RestartAnswer:
    """A live re-cap where the running runner can take it (nothing, where nothing changes);
    otherwise `stopping()`, the runner stopped and a new one started."""
    was, caps = caps_change(paths, req)
    rec = managed_runner(paths)
    # killed: nothing in flight (a dry run said `running`)
    st = (JobStatus.read(paths.status) or JobStatus()).gone_unless(rec is not None)
    live = _takes_live(st, rec, req, caps, was)
    held = forced = None
    if not live:  # what the new runner would refuse, before the running one is stopped
        st, answering = _answering_now(paths, caps, st, rec)
        mixed = {} if req.force else mixed_settings(paths, caps, answering=answering)
        if mixed and _recap_instead(rec, req, caps, was):
            # the running runner keeps making records with the settings they were made with: a
            # caps change is safe to give it live, where a restart would have to mix them
            live, held = True, f"{dataset_changes_text(mixed)}: the deployed release is not started"
        else:
            forced = refuse_mixed_settings(paths, caps, req.force, answering=answering)
    if req.dry_run:
        replaced = prompts_replaced(paths, st)
        change = caps != was or bool(replaced)
        mode = ("live" if change else "unchanged") if live else ("restart" if rec else "start")
        return RestartAnswer(
            mode=mode,
            dry_run=True,
            running_pid=rec.pid if rec else None,
            caps=caps_summary(st, caps, was, job_datasets(), replaced, uncounted(paths, st, caps)),
            kept=caps,
            was=was,
            held_back=held,
            forced_mix=forced,
        )
    if live:
        # a restart that changes nothing on a running job touches nothing
        change = caps != was or bool(prompts_replaced(paths, st))
        if change:
            st = recap(paths, rec, caps, was)
        if st is not None:
            return RestartAnswer(
                mode="live" if change else "unchanged",
                pid=rec.pid,
                state=st.state,
                caps=caps_summary(st, caps, was, job_datasets()),  # those it never opened too
                reloaded=st.reloaded if change else {},
                kept=caps,
                was=was,
                held_back=held,
            )
        if held:  # it ended meanwhile: a start would mix the settings
            refuse_mixed_settings(paths, caps, req.force)
        # the runner ended meanwhile (finished, or killed and not yet brought back): a start
    stopping()
    stopped = _restarts_stop(paths, req)
    started = start(paths, req, stopped=stopped.was_running)
    started.mode = "restart" if stopped.was_running else "start"
    started.stopped, started.lost_in_flight = stopped, stopped.lost_in_flight
    return started
