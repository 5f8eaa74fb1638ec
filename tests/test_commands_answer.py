"""Every command answers what it does, typed as a user types it (the venv's `invoke`): from a
subdirectory of the project, with a mistyped prompt path, on a host where no job ever ran, with
`--no-server` while the server is down, and `plan` asked for help or for nothing."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import REPO, ctrl_c_as_typed, free_port, piped_env, write_prompts
from tests.helpers.as_typed import INVOKE, typed


def _project(tmp_path, **job_overrides) -> tuple:
    """A project of the user's own: tasks.py (as the repository's), hosts.yaml, prompts."""
    proj = tmp_path / "proj"
    write_prompts(proj / "data" / "prompts" / "B1.jsonl", 4, "B1")
    shutil.copy(REPO / "tasks.py", proj / "tasks.py")
    job = {
        "datasets": {"B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": 100}},
        "engine": {"kind": "simulate", "concurrency": 2, "tokens_per_s": 100_000},
        **job_overrides,
    }
    data = {
        "default_host": "box",
        "hosts": {"box": {"connect": "local", "remote_dir": str(tmp_path / "host")}},
        "job": job,
        "recover": False,
    }
    (proj / "hosts.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return proj, tmp_path / "host"


def run_in(cwd, line: str) -> subprocess.CompletedProcess:
    """`line` typed in `cwd`, nothing set: invoke finds tasks.py, deploytool its hosts.yaml."""
    args = line.split()
    assert args[0] == "invoke"
    return subprocess.run(
        [INVOKE, *args[1:]], cwd=cwd, env=piped_env(), capture_output=True, text=True, timeout=120
    )


def _held_job(tmp_path, openai_server) -> tuple:
    """A deployed job whose server never answers (until `srv.hold_after = None`): a runner asked
    to stop waits out its grace, however slow the machine. (srv, project, host root)."""
    srv = openai_server()
    srv.hold_after = 0
    proj, root = _project(
        tmp_path,
        engine={"kind": "openai", "base_url": srv.url, "model": "test-model", "concurrency": 2},
    )
    assert run_in(proj, "invoke deploy").returncode == 0
    return srv, proj, root


def _at_a_terminal(proj, *args: str) -> subprocess.Popen:
    """The venv's invoke as a terminal's foreground job, so a Ctrl-C reaches it as typed."""
    return subprocess.Popen(
        [INVOKE, *args],
        cwd=proj,
        env=dict(piped_env(), PYTHONFAULTHANDLER="1"),  # a hang says where: SIGABRT
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group
        preexec_fn=ctrl_c_as_typed,
    )


def one_line_error(res, code: int) -> str:
    assert res.returncode == code, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in res.stderr
    return lines[0]


def test_the_commands_work_from_any_subdirectory_of_the_project(tmp_path):
    proj, root = _project(tmp_path)
    sub = proj / "data" / "prompts"
    assert run_in(sub, "invoke deploy").returncode == 0
    res = run_in(sub, "invoke restart --max-samples 2")
    assert res.returncode == 0, res.stderr
    assert run_in(sub, "invoke tail").returncode == 0
    assert (root / "data" / "outputs" / "B1.jsonl").read_text().count("\n") == 2
    # outside any project: the fix works with the command typed (invoke has its own --config)
    (proj / "hosts.yaml").rename(proj / "elsewhere.yaml")
    line = one_line_error(run_in(sub, "invoke status"), 2)
    assert "no hosts.yaml in" in line and "DEPLOYTOOL_CONFIG=" in line and "--config" not in line


def test_deploy_checks_every_prompt_file_before_anything_is_sent(tmp_path):
    proj, root = _project(tmp_path)
    data = yaml.safe_load((proj / "hosts.yaml").read_text())
    data["job"]["datasets"]["B2"] = {"prompts": "data/prompts/B2.jsnol", "est_tokens": 100}
    (proj / "hosts.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    line = one_line_error(run_in(proj, "invoke deploy"), 2)
    assert (
        "job.datasets.B2.prompts: data/prompts/B2.jsnol" in line and "nothing was deployed" in line
    )
    assert not (root / "current").exists()


def test_tail_once_answers_as_tail_on_a_host_where_no_job_ran(tmp_path):
    proj, _ = _project(tmp_path)
    assert run_in(proj, "invoke deploy").returncode == 0
    assert run_in(proj, "invoke tail --once").returncode == 1
    assert run_in(proj, "invoke tail").returncode == 1


def test_no_server_while_the_server_is_down_is_refused_with_what_to_type(tmp_path):
    port = free_port()
    proj, root = _project(
        tmp_path,
        engine={"kind": "openai", "base_url": f"http://127.0.0.1:{port}/v1", "model": "m"},
    )
    data = yaml.safe_load((proj / "hosts.yaml").read_text())
    data["server"] = {"command": "vllm", "model": "m", "port": port}
    (proj / "hosts.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    assert run_in(proj, "invoke deploy").returncode == 0
    line = one_line_error(run_in(proj, "invoke restart --no-server"), 1)
    assert "server is down" in line and "`invoke server.start`" in line and "--force" in line
    assert not (root / "run" / "runner.pid").exists()  # nothing was started


def test_plan_asked_for_help_or_for_nothing_answers_like_every_task(tmp_path):
    res = typed("invoke plan --help", tmp_path / "unused.yaml")
    assert res.returncode == 0 and "--tokens-per-dataset" in res.stdout
    line = one_line_error(typed("invoke plan", tmp_path / "unused.yaml"), 2)
    assert "`invoke plan --tokens-per-dataset 10M`" in line


def test_stop_says_what_it_stops_while_it_waits_and_ctrl_c_leaves_the_host_stopping(
    tmp_path, openai_server
):
    import os
    import signal

    from remote.common import procinfo
    from tests.conftest import status, wait_for

    srv, proj, root = _held_job(tmp_path, openai_server)
    assert run_in(proj, "invoke restart").returncode == 0
    pid = status(root)["pid"]
    wait_for(lambda: status(root)["in_flight"], what="requests held by the server")
    res = run_in(proj, "invoke stop --grace 2")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert re.fullmatch(  # what happens, plainly, in order
        rf"box: stopping runner pid {pid}: SIGTERM; the [1-9]\d* requests in flight get 2s to finish, "
        r"then the runner cuts off the rest and exits \(killed at 5s if it has not\)",
        lines[0],
    ), lines
    assert any(line.strip().startswith("box: waiting") for line in lines[1:-1]), lines
    assert not [x for x in lines if "SIGKILL next" in x or "finishing up" in x], lines
    assert "stopped" in lines[-1]

    assert run_in(proj, "invoke restart").returncode == 0
    pid = status(root)["pid"]
    proc = _at_a_terminal(proj, "stop", "--grace", "3600")  # it cannot end before the Ctrl-C
    first = proc.stdout.readline()
    assert first.startswith(f"box: stopping runner pid {pid}"), first
    # every view says it: no new requests, and the grace those in flight got
    wait_for(lambda: status(root).get("stopping") == 3600, what="status.json saying stopping")
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group gets it
    try:
        rest, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # its threads' stacks, to read in the failure
        raise AssertionError("Ctrl-C did not detach:\n" + proc.communicate()[0][-6000:]) from None
    assert proc.returncode == 1, rest
    assert "detached: the host goes on stopping the job" in rest and "Traceback" not in rest, rest
    head = run_in(proj, "invoke status").stdout.splitlines()[0]
    assert head.startswith(f"box: stopping (pid {pid}"), head  # it read `running`, in its grace
    log = root / "logs" / "runner.log"
    stop_line = "SIGTERM: no new requests"  # this runner's, after the first one's
    wait_for(lambda: log.read_text().count(stop_line) == 2, what="the runner told to stop")
    srv.hold_after = None  # the answers in flight come: the runner's grace ends with them
    wait_for(lambda: not procinfo.alive(pid), timeout=60, what="the runner stopped all the same")
    assert status(root)["state"] == "stopped", log.read_text()[-3000:]


def test_a_restart_says_the_runner_it_stops_and_ctrl_c_leaves_the_host_restarting(
    tmp_path, openai_server
):
    import os
    import signal

    from tests.conftest import status, wait_for

    srv, proj, root = _held_job(tmp_path, openai_server)  # the old runner waits out its grace
    assert run_in(proj, "invoke restart").returncode == 0
    pid = status(root)["pid"]
    proc = _at_a_terminal(proj, "restart", "--hard", "--grace", "3600")
    try:
        lines = []
        while not any(f"box: stopping runner pid {pid}: SIGTERM" in line for line in lines):
            line = proc.stdout.readline()
            assert line, lines  # it ended without saying what it stops
            lines.append(line)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group gets it
        rest, _ = proc.communicate(timeout=120)
        assert proc.returncode == 1, rest
        assert "detached: the host goes on with what it was asked" in rest, rest
        assert "Traceback" not in rest, rest
        srv.hold_after = None  # the answers in flight come: the old runner's grace ends
        wait_for(
            lambda: (
                status(root).get("pid") not in (None, pid)
                and status(root)["state"] in ("running", "finished")  # 4 prompts: it may end
            ),
            timeout=60,
            what="the host's restart seen through without us",
        )
    finally:
        proc.kill()
        run_in(proj, "invoke stop --grace 0")


def test_a_stop_typed_over_a_drain_stops_at_once_and_the_restart_that_drained_starts_nothing(
    tmp_path, openai_server
):
    """`invoke restart --hard --drain` in one terminal, `invoke stop --grace 2` in another: the
    host carries out one command at a time, so the stop waited out the whole drain (minutes of
    answers) while saying `killing it (SIGKILL)`, and the restart then started a new runner the
    stop had to stop again. A stop cuts a drain short: the runner gets its grace at once, and the
    restart that drained starts nothing, saying so."""
    from remote.common import procinfo
    from tests.conftest import status, wait_for

    srv, proj, root = _held_job(tmp_path, openai_server)  # its answers never come: a drain waits
    assert run_in(proj, "invoke restart").returncode == 0
    pid = status(root)["pid"]
    wait_for(lambda: status(root)["in_flight"], what="requests held by the server")
    drain = _at_a_terminal(proj, "restart", "--hard", "--drain")
    try:
        wait_for(lambda: status(root).get("draining"), what="the restart's drain under way")
        # a dry run changes nothing and waits for nothing: it held the drain's lock, and the
        # restart it previews (a raised cap's) said nothing for the drain's length
        dry = run_in(proj, "invoke restart --cap B1=3 --dry-run")
        assert dry.returncode == 0 and "B1" in dry.stdout, dry.stdout + dry.stderr
        # the runner is ending: no re-cap reaches it, the restart starts one after the drain
        assert "live" not in dry.stdout and "would stop" in dry.stdout, dry.stdout
        res = run_in(proj, "invoke stop --grace 2")  # without the cut: the drain's timeout (1 h)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "the drain under way (another command's) was cut short" in res.stdout, res.stdout
        assert f"box: stopped [{pid}]" in res.stdout and "no runner was running" not in res.stdout
        out, _ = drain.communicate(timeout=120)
        assert drain.returncode == 1, out
        assert "none started: a stop was typed while this restart drained" in out, out
        assert "Traceback" not in out + res.stderr
        assert not procinfo.alive(pid) and status(root)["pid"] == pid  # no runner after it
        assert status(root)["state"] == "stopped"
        # a `stop --drain` cut short says what the stop cut off (it said 0, and 30s of grace)
        assert run_in(proj, "invoke restart").returncode == 0
        wait_for(lambda: status(root)["in_flight"], what="requests held by the server")
        drain = _at_a_terminal(proj, "stop", "--drain")
        wait_for(lambda: status(root).get("draining"), what="the stop's drain under way")
        assert run_in(proj, "invoke stop --grace 1").returncode == 0
        out, _ = drain.communicate(timeout=120)
        cut = status(root)["abandoned"]
        assert cut and f"requests cut off in flight: {cut} (the next start" in out, out
        assert "its drain was cut short by a stop typed meanwhile" in out, out
    finally:
        drain.kill()
        srv.hold_after = None
        run_in(proj, "invoke stop --grace 0")


def test_a_stop_typed_over_a_restarts_grace_stops_at_once_and_the_restart_starts_nothing(
    tmp_path, openai_server
):
    """`invoke restart --hard --grace 40` in one terminal, `invoke stop` in another: the stop
    waited out the restart's grace, the restart started a runner, and the stop then stopped that
    one with a grace of its own (62 s, and 8 requests sent only to be cut off). As over a drain,
    the stop gives the runner its grace at once and the restart under way starts nothing."""
    from remote.common import procinfo
    from tests.conftest import status, wait_for

    srv, proj, root = _held_job(tmp_path, openai_server)  # its answers never come: a grace is whole
    assert run_in(proj, "invoke restart").returncode == 0
    pid = status(root)["pid"]
    wait_for(lambda: status(root)["in_flight"], what="requests held by the server")
    restart = _at_a_terminal(proj, "restart", "--hard", "--grace", "600")
    try:
        wait_for(lambda: status(root).get("stopping") == 600, what="the restart's grace under way")
        res = run_in(proj, "invoke stop --grace 1")  # without the cut: 600 s, then another runner
        assert res.returncode == 0, res.stdout + res.stderr
        assert "the restart under way (another command's) was cut short" in res.stdout, res.stdout
        assert "stopping already" not in res.stdout, res.stdout
        assert f"box: stopped [{pid}]" in res.stdout, res.stdout
        out, _ = restart.communicate(timeout=120)
        assert restart.returncode == 1, out
        assert "none started: a stop was typed while this restart stopped the runner" in out, out
        assert "Traceback" not in out + res.stderr
        assert not procinfo.alive(pid) and status(root)["pid"] == pid  # no runner after it
        # a shorter stop over a stop's grace takes over too (`--grace 1` waited out 15 s)
        assert run_in(proj, "invoke restart").returncode == 0
        pid = status(root)["pid"]
        wait_for(lambda: status(root)["in_flight"], what="requests held by the server")
        restart = _at_a_terminal(proj, "stop", "--grace", "600")
        wait_for(lambda: status(root).get("stopping") == 600, what="the first stop's grace")
        res = run_in(proj, "invoke stop --grace 1")
        assert "the stop under way (another command's) was cut to this one's grace" in res.stdout
        assert f"box: stopped [{pid}]" in res.stdout and "stopping already" not in res.stdout
        out, _ = restart.communicate(timeout=120)
        assert restart.returncode == 0 and "Traceback" not in out, out
        assert not procinfo.alive(pid)
    finally:
        restart.kill()
        srv.hold_after = None
        run_in(proj, "invoke stop --grace 0")


def test_pull_and_export_with_nothing_deployed_leave_no_empty_folder(tmp_path):
    proj, _ = _project(tmp_path)
    for line in ("invoke pull", "invoke export"):
        res = run_in(proj, line)
        assert res.returncode != 0 and "Traceback" not in res.stderr, res.stdout + res.stderr
        assert not (proj / "pulled").exists(), line


def test_rollback_names_what_it_can_go_to_and_goes_further_back_each_time(tmp_path):
    ids = []
    for n in range(3):  # three releases: the job changed between deploys
        proj, root = _project(tmp_path, sampling={"max_tokens": 10 + n})
        assert run_in(proj, "invoke deploy").returncode == 0
        ids.append((root / "current").resolve().name)
    res = run_in(proj, "invoke rollback --to nosuchid")
    line = one_line_error(res, 2)
    assert all(i in line for i in ids), line  # the releases it could go to
    for want in (ids[1], ids[0]):
        assert run_in(proj, "invoke rollback").returncode == 0
        assert (root / "current").resolve().name == want
    assert run_in(proj, f"invoke rollback --to {ids[2][:6]}").returncode == 0
    assert (root / "current").resolve().name == ids[2]


def test_rollback_goes_to_the_release_that_ran_past_edits_that_never_did_and_says_the_change(
    tmp_path,
):
    proj, root = _project(tmp_path, sampling={"temperature": 1.0})
    for line in ("invoke deploy", "invoke restart", "invoke tail"):
        assert run_in(proj, line).returncode == 0, line
    ran = (root / "current").resolve().name
    for temp in (0.7, 0.8):  # two edits, each refused at its restart: neither ran
        _project(tmp_path, sampling={"temperature": temp})
        assert run_in(proj, "invoke deploy").returncode == 0
        assert "B1: its records were made with different sampling" in one_line_error(
            run_in(proj, "invoke restart"), 2
        )
    left = (root / "current").resolve().name
    res = run_in(proj, "invoke rollback")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (root / "current").resolve().name == ran
    assert res.stdout.splitlines() == [
        f"box: current -> {ran} (was {left}, from which no runner ran): the last release a "
        "runner ran from",
        "  job.json: sampling.temperature 0.8 → 1.0",
    ]
    assert run_in(proj, "invoke restart").returncode == 0  # the records' settings again


@pytest.mark.slow
def test_status_after_a_restart_with_nothing_to_do_gives_the_jobs_own_rate(tmp_path):
    proj, root = _project(tmp_path)
    write_prompts(proj / "data" / "prompts" / "B1.jsonl", 40, "B1")
    spec = yaml.safe_load((proj / "hosts.yaml").read_text())
    spec["job"]["engine"]["tokens_per_s"] = 400  # 40 answers of ~100 tokens: some seconds of work
    (proj / "hosts.yaml").write_text(yaml.safe_dump(spec))
    for line in ("invoke deploy", "invoke restart", "invoke tail"):
        assert run_in(proj, line).returncode == 0, line
    first = next(
        x for x in run_in(proj, "invoke status").stdout.splitlines() if x.split()[:1] == ["B1"]
    )
    assert run_in(proj, "invoke restart").returncode == 0  # nothing left to do
    res = run_in(proj, "invoke status")
    row = next(x for x in res.stdout.splitlines() if x.split()[:1] == ["B1"])
    rate = row.split()[4]
    assert rate.endswith("*") and float(rate.rstrip("*k")) > 0, res.stdout
    # B1 complete: its rate is fixed (it read 3.3k* where it ran, 413* after a restart)
    assert rate == first.split()[4], (first, row)
    assert "tokens over the time their answers were being made" in res.stdout


def test_a_cap_lowered_on_datasets_left_out_is_said_then_and_when_they_run_again(tmp_path):
    """`restart --datasets B1 --max-samples 10` lowered every dataset's cap with no word (the table
    said `all → not run`); `restart --datasets all` then said `targets go up: B2 (not run → 10)`
    with all of B2 done and 14 of its records out of the counts and the export."""
    proj, root = _project(tmp_path)
    spec = yaml.safe_load((proj / "hosts.yaml").read_text())
    for name in ("B1", "B2"):
        write_prompts(proj / "data" / "prompts" / f"{name}.jsonl", 24, name)
        spec["job"]["datasets"][name] = {"prompts": f"data/prompts/{name}.jsonl", "est_tokens": 100}
    (proj / "hosts.yaml").write_text(yaml.safe_dump(spec))
    for line in ("invoke deploy", "invoke restart", "invoke tail"):
        assert run_in(proj, line).returncode == 0, line
    res = run_in(proj, "invoke restart --datasets B1 --max-samples 10")
    assert res.returncode == 0, res.stdout + res.stderr
    row = next(x for x in res.stdout.splitlines() if x.split()[:1] == ["B2"])
    assert "all → not run (cap 10)" in row, res.stdout
    assert "caps changed of datasets not run now, kept for when they run again: B2 (all → 10)" in (
        res.stdout
    )
    for line in ("invoke restart --datasets all --dry-run", "invoke restart --datasets all"):
        res = run_in(proj, line)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "go up" not in res.stdout, res.stdout  # all ten done: nothing to raise
        row = next(x for x in res.stdout.splitlines() if x.split()[:1] == ["B2"])
        assert row.split()[-3:] == ["10", "10", "complete"], row  # never `0–10 ?`
        assert "targets below the records made: B2 (run again at 10: 14 beyond it)" in res.stdout


@pytest.mark.slow
def test_a_runner_killed_before_its_first_minute_leaves_its_datasets_rates_to_the_next(tmp_path):
    """A dataset's rate is fixed once it is complete, a kill -9 of the runner that made it
    included: status.json keeps each dataset's made time every second, so a runner killed before
    its next minute line in run/history.jsonl loses none of it (B1 read `338*`, then `-` for
    good)."""
    import os
    import signal

    from remote.common import procinfo
    from tests.conftest import status, wait_for

    proj, root = _project(tmp_path)
    write_prompts(proj / "data" / "prompts" / "B1.jsonl", 12, "B1")  # some seconds: a rate
    write_prompts(proj / "data" / "prompts" / "B2.jsonl", 400, "B2")  # at work at the kill
    spec = yaml.safe_load((proj / "hosts.yaml").read_text())
    spec["job"]["datasets"]["B2"] = {"prompts": "data/prompts/B2.jsonl", "est_tokens": 100}
    spec["job"]["engine"]["tokens_per_s"] = 200  # ~90 tokens an answer: half a second each
    (proj / "hosts.yaml").write_text(yaml.safe_dump(spec))
    for line in ("invoke deploy", "invoke restart"):
        assert run_in(proj, line).returncode == 0, line
    try:

        def b1_done():
            st = status(root)
            b1 = st["datasets"]["B1"]
            return st if b1["state"] == "complete" and b1["mean_tokens_per_s"] else None

        before = wait_for(b1_done, what="B1 complete, its rate said")
        rate = before["datasets"]["B1"]["mean_tokens_per_s"]
        os.kill(before["pid"], signal.SIGKILL)  # within its first minute: one history line, t=0
        wait_for(lambda: not procinfo.alive(before["pid"]), what="the runner gone")
        assert run_in(proj, "invoke restart").returncode == 0
        after = wait_for(
            lambda: (
                (st := status(root))["pid"] != before["pid"]
                and st["state"] == "running"
                and "B1" in st["datasets"]
                and st
            ),
            what="the next runner at work",
        )
        assert after["datasets"]["B1"]["mean_tokens_per_s"] == pytest.approx(rate, rel=0.01)
        shown = run_in(proj, "invoke status").stdout
        b1 = next(x for x in shown.splitlines() if x.split()[:1] == ["B1"])
        assert b1.split()[4].endswith("*"), shown  # its mean, where it read `-`
    finally:
        run_in(proj, "invoke stop --grace 0")


@pytest.mark.slow
def test_status_after_a_kill_9_counts_the_records_the_runner_wrote_after_its_last_status(
    tmp_path,
):
    """A runner killed with -9 (no watcher to start it again) wrote records after its last status
    write: status counts them, as the files, plan and report do (it said B2 31/32 over 32)."""
    import os
    import signal

    from remote.common import procinfo
    from tests.conftest import status, wait_for

    proj, root = _project(tmp_path)
    write_prompts(proj / "data" / "prompts" / "B1.jsonl", 20_000, "B1")  # at work at the kill
    for line in ("invoke deploy", "invoke restart"):
        assert run_in(proj, line).returncode == 0, line
    pid = wait_for(
        lambda: (st := status(root))["datasets"]["B1"]["done"] >= 50 and st["pid"],
        what="records written",
    )
    os.kill(pid, signal.SIGKILL)  # answers land every few ms: some after its last status write
    wait_for(lambda: not procinfo.alive(pid), what="the runner gone")
    res = run_in(proj, "invoke status --json")
    b1 = json.loads(res.stdout)["box"]["datasets"]["B1"]
    made = [json.loads(x) for x in (root / "data" / "outputs" / "B1.jsonl").open()]
    assert b1["done"] == len(made), (b1["done"], len(made), status(root)["datasets"]["B1"])
    assert b1["completion_tokens"] == sum(r["usage"]["completion_tokens"] for r in made)
    assert "B1  " in run_in(proj, "invoke status").stdout  # the table as typed, no traceback
    # the dry run of the restart that starts it again says what that restart then says
    dry = run_in(proj, "invoke restart --dry-run").stdout
    row = next(x.split() for x in dry.splitlines() if x.split()[:1] == ["B1"])
    assert row[-1] == "pending", dry  # `running`, for a runner killed


def test_a_local_copy_that_differs_names_the_command_that_fetches_it_again(tmp_path):
    proj, root = _project(tmp_path)
    for line in ("invoke deploy", "invoke restart --max-samples 2", "invoke tail", "invoke pull"):
        assert run_in(proj, line).returncode == 0, line
    mine = proj / "pulled" / "box" / "B1.jsonl"
    mine.write_bytes(b"x" + mine.read_bytes()[1:])  # not the host's bytes any more
    out = one_line_error(run_in(proj, "invoke export --format sharegpt"), 1)
    assert out.endswith("move them aside, or download them again: `invoke pull --refetch`"), out
    assert run_in(proj, "invoke pull --refetch").returncode == 0
    assert run_in(proj, "invoke export --format sharegpt").returncode == 0
    # a byte changed inside the copy, its length the same: --refetch compares every byte
    data = mine.read_bytes()
    mid = len(data) // 2
    mine.write_bytes(data[:mid] + (b"Y" if data[mid : mid + 1] != b"Y" else b"Z") + data[mid + 1 :])
    assert run_in(proj, "invoke pull --refetch").returncode == 0
    assert mine.read_bytes() == data
    # of a host that is not the default: its fix names it (typed as said, it fetched the default)
    spec = yaml.safe_load((proj / "hosts.yaml").read_text())
    spec["hosts"]["spare"] = {"connect": "local", "remote_dir": str(tmp_path / "spare")}
    spec["default_host"] = "spare"
    (proj / "hosts.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    mine.write_bytes(b"x" + data[1:])
    out = one_line_error(run_in(proj, "invoke pull --host box"), 1)
    assert out.endswith("`invoke pull --refetch --host box`"), out
    assert run_in(proj, "invoke pull --refetch --host box").returncode == 0
    assert mine.read_bytes() == data
    spec["default_host"] = "box"
    (proj / "hosts.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    # typed in a folder of the project: the same pulled/ beside hosts.yaml, nothing fetched again
    (proj / "docs").mkdir()
    res = run_in(proj / "docs", "invoke pull")
    assert res.returncode == 0 and "0 B received" in res.stdout, res.stdout
    assert not (proj / "docs" / "pulled").exists()
    # export's and report's files too: typed in remote/, they went into the next release
    for line in ("invoke export --format sharegpt", "invoke report"):
        assert run_in(proj / "docs", line).returncode == 0, line
    assert (proj / "export-sharegpt.jsonl").exists() and (proj / "report-box.html").exists()
    assert not list((proj / "docs").iterdir())


def test_a_deploy_or_rollback_while_another_is_under_way_is_one_line_and_changes_nothing(tmp_path):
    """Two terminals deploying to one host: the second says so and leaves the host as it was."""
    import fcntl
    import os

    proj, root = _project(tmp_path)
    assert run_in(proj, "invoke deploy").returncode == 0
    (proj / "data" / "prompts" / "B1.jsonl").write_text("")  # a change to send
    write_prompts(proj / "data" / "prompts" / "B1.jsonl", 6, "B1")
    before = sorted((p.relative_to(root), p.stat().st_mtime_ns) for p in root.rglob("*"))
    fd = os.open(root / "releases" / ".deploy.lock", os.O_RDWR)  # the first deploy, under way
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for line in ("invoke deploy", "invoke rollback"):
            res = run_in(proj, line)
            assert res.returncode == 1, res.stdout + res.stderr
            err = res.stderr.strip().splitlines()
            assert (
                len(err) == 1 and "another deploy or rollback to this host is under way" in err[0]
            )
            assert "run this again once it has ended" in err[0], err
            assert sorted((p.relative_to(root), p.stat().st_mtime_ns) for p in root.rglob("*")) == (
                before
            )
    finally:
        os.close(fd)
    assert run_in(proj, "invoke deploy").returncode == 0


def test_a_file_without_ids_rewritten_under_its_records_is_refused_by_any_start_hard_included(
    tmp_path,
):
    """Prompts without `id` are named by line: a line put at the top of the file would make every
    record name the prompt after its own, and the first one never asked. A start on it (a finished
    job's restart, `--hard`) is refused before anything is stopped, in one line with the ways out;
    prompts appended at the end start as before."""
    proj, root = _project(tmp_path)
    path = proj / "data" / "prompts" / "B1.jsonl"
    write_prompts(path, 6, "B1", fmt="prompt")
    assert run_in(proj, "invoke deploy").returncode == 0
    assert run_in(proj, "invoke restart --max-samples 3").returncode == 0
    assert "finished" in run_in(proj, "invoke tail").stdout.splitlines()[-1]
    first = path.read_text()
    rewritten = json.dumps({"prompt": "a new first prompt"}) + "\n" + first
    path.write_text(rewritten)
    on_host = root / "data" / "prompts" / "B1.jsonl"
    for line in ("invoke deploy --dry-run", "invoke deploy"):  # said before the host has it
        res = run_in(proj, line)
        assert res.returncode == 2, res.stdout + res.stderr
        err = res.stderr.strip().splitlines()
        assert len(err) == 1 and "B1: data/prompts/B1.jsonl was rewritten" in err[0], err
        assert "so it is not deployed and nothing changed" in err[0], err
        assert on_host.read_text() == first
    # ids given to the rewritten file, numbered as the line-number ids were (B1-000000, …): the
    # old records' very names, for the prompt above each now; refused the same
    numbered = [
        json.dumps({"id": f"B1-{i:06d}", **json.loads(line)})
        for i, line in enumerate(rewritten.splitlines())
    ]
    path.write_text("\n".join(numbered) + "\n")
    res = run_in(proj, "invoke deploy")
    assert res.returncode == 2 and "was rewritten" in res.stderr, res.stdout + res.stderr
    assert on_host.read_text() == first
    on_host.write_text(rewritten)  # edited on the host itself: every start refuses it
    outputs = root / "data" / "outputs"
    before = {p.name: p.read_bytes() for p in outputs.iterdir()}
    for line in ("invoke restart --max-samples 5", "invoke restart --hard --max-samples 5"):
        res = run_in(proj, line)
        assert res.returncode == 2, res.stdout + res.stderr
        err = res.stderr.strip().splitlines()
        assert len(err) == 1, err
        assert "B1: data/prompts/B1.jsonl was rewritten or cut, not only appended to" in err[0]
        assert "move data/outputs/B1.jsonl aside" in err[0] and "--hard" not in err[0]
        assert {p.name: p.read_bytes() for p in outputs.iterdir()} == before
    path.write_text(first + json.dumps({"prompt": "one more at the end"}) + "\n")  # appended
    assert run_in(proj, "invoke deploy").returncode == 0
    assert run_in(proj, "invoke restart --max-samples 7").returncode == 0
    assert "finished" in run_in(proj, "invoke tail").stdout.splitlines()[-1]
    asked = [json.loads(x)["conversations"][0]["content"] for x in (outputs / "B1.jsonl").open()]
    want = [json.loads(x)["prompt"] for x in path.read_text().splitlines()]
    assert sorted(asked) == sorted(want)  # each prompt once, each record its own prompt's


def test_ctrl_c_in_a_command_of_this_machine_says_so_and_leaves_its_file_as_it_was(tmp_path):
    """Ctrl-C while export reads a pulled file (a pipe nobody writes to, so it waits there): one
    line, exit 1, no traceback, and the training file of the export before as it was."""
    import errno
    import os
    import signal
    import time

    proj, _ = _project(tmp_path)
    here = proj / "pulled" / "box"
    here.mkdir(parents=True)
    os.mkfifo(here / "B1.jsonl")
    out = proj / "train.jsonl"
    out.write_text("the export before\n")
    proc = _at_a_terminal(proj, "export", "--no-pull", "--format", "sharegpt", "--out", str(out))
    try:
        deadline = time.monotonic() + 120
        while True:  # export has the pipe open to read: a writer may open it now
            try:
                fd = os.open(here / "B1.jsonl", os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as e:
                assert e.errno == errno.ENXIO and proc.poll() is None, proc.stdout.read()
                assert time.monotonic() < deadline, "export never opened the pulled file"
                time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        said, _ = proc.communicate(timeout=120)
        os.close(fd)
        assert proc.returncode == 1, said
        assert "interrupted (Ctrl-C): nothing here is left half-written" in said, said
        assert "Traceback" not in said, said
        assert out.read_text() == "the export before\n"
    finally:
        proc.kill()


def test_a_half_edited_job_in_hosts_yaml_never_blocks_status_tail_or_a_stop(
    tmp_path, openai_server
):
    """A typo in job.sampling while a job runs: every command that sends the job refuses it, but
    status, tail and a stop need only the host's entry: each says the error and goes on (status
    and tail blocked on it while the job ran on)."""
    from tests.conftest import status, wait_for

    srv, proj, root = _held_job(tmp_path, openai_server)
    assert run_in(proj, "invoke restart").returncode == 0
    wait_for(lambda: status(root)["state"] == "running", what="the job at work")
    cfg = proj / "hosts.yaml"
    data = yaml.safe_load(cfg.read_text())
    data["job"]["sampling"] = {"temprature": 1.0}
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    assert run_in(proj, "invoke restart").returncode == 2  # the job is read: refused
    for command in ("invoke status", "invoke tail --once"):
        res = run_in(proj, command)
        # the look shown whole, the file's error said on stderr, the exit that of bad input
        assert res.returncode == 2, command + res.stdout + res.stderr
        assert "temprature: unknown key" in res.stderr, command
        assert f"{command.split()[1]} needs only the host's entry: going on" in res.stderr, command
        assert "running" in res.stdout and "not the one deployed" not in res.stdout, command
    typo = cfg.read_text()
    # a YAML syntax error in the job section (a brace left open): the host sections still read
    cfg.write_text(typo.replace("sampling:\n", "sampling: {\n", 1))
    res = run_in(proj, "invoke status")
    assert res.returncode == 2 and "YAML syntax error at line" in res.stderr, res.stderr
    assert "running" in res.stdout, res.stdout
    cfg.write_text(typo)
    res = run_in(proj, "invoke stop --grace 0")
    assert res.returncode == 0, res.stdout + res.stderr  # the stop asked for was done
    assert "hosts.yaml: job.sampling.temprature: unknown key (did you mean 'temperature'?)" in (
        res.stderr
    )
    assert "a stop needs only the host's entry: going on" in res.stderr
    assert status(root)["state"] == "stopped"
