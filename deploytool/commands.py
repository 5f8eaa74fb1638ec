"""What each command does: load config, act on hosts, render. Returns an exit code or raises.

Each command imports what it uses when it runs: `deploytool --help` or `status` on the local host
should not pay for rich tables, tarfile or paramiko it never touches.
"""

from __future__ import annotations

import dataclasses

from remote.common.protocol import GRACE_S
from remote.common.stages import FIRST, stage_of

from .config import load_config
from .config.locate import project_config
from .errors import DeployToolError, ExitCode, MultiHostError, UsageError


def _config(hosts_only: bool = False):
    """hosts.yaml, read once; the hints then name commands as typed with it."""
    from .views import typed

    config = load_config(hosts_only=hosts_only)
    typed.use(config.path, config.default_host, project_config())
    return config


def _config_to_look(doing: str):
    """hosts.yaml for a command that looks at the job or stops it: a half-edited job section must
    never block it (the hosts' entries are enough), so its error is said on stderr and the command
    goes on without comparing the job with the deployed one (`config.hosts_only` says so: a look
    still exits non-zero after it, the file being bad input)."""
    import sys

    from .config import ConfigError

    try:
        return _config()
    except ConfigError as e:
        config = _config(hosts_only=True)
        print(
            f"{e}; {doing} needs only the host's entry: going on (the deployed job is not "
            "compared with it)",
            file=sys.stderr,
        )
        return config


def _looked(config, code: int) -> int:
    """A look's exit status: bad input where hosts.yaml could not be read whole."""
    return ExitCode.BAD_INPUT if config.hosts_only and code == ExitCode.OK else code


def _run(config, host_spec, fn, show, outcome=None):
    """on_hosts + render every host's result, failures included, then re-raise one error for all.
    `outcome(results, failures)`: said after the failures, where several hosts ran."""
    from .ops.hosts import on_hosts
    from .views import render

    hosts = config.select_hosts(host_spec)
    try:
        results = on_hosts(config, hosts, fn, render.trusted_key)
    except MultiHostError as e:
        for name in e.results:
            show(e.results[name])
        if len(hosts) == 1:
            (err,) = e.failures.values()
            err.host = hosts[0].name
            raise err from None  # its own message and log lines
        render.failures(e.failures)
        if outcome is not None:
            outcome(e.results, e.failures)
        raise DeployToolError(
            f"{len(e.failures)} of {len(hosts)} hosts failed: {', '.join(e.failures)}", e.code
        ) from None
    for name in results:
        show(results[name])
    return results


def _run_to_end(config, host_spec, fn, show, doing: str, outcome=None) -> int:
    """`_run`, where a Ctrl-C leaves each host going on with what it was asked (a stop or a restart
    begun is seen through there): said so, exit 1."""
    from .views import render_restart

    try:
        _run(config, host_spec, fn, show, outcome)
    except KeyboardInterrupt:
        render_restart.detached(host_spec or config.default_host, doing)
        return ExitCode.FAILED
    return ExitCode.OK


def listens(spec, engine: str = "openai") -> str:
    """What `server.start` would listen on, and whether it asks for a key (none for a job whose
    engine is the built-in stand-in: no server answers it)."""
    if engine == "simulate":
        return "none (engine simulate)"
    if spec.headless:
        return "no HTTP (--headless)"
    return f"{spec.listen_host}:{spec.port}, " + ("key" if spec.api_key else "no key")


def hosts(host_spec: str | None) -> int:
    from .ops.hosts import on_hosts, probe
    from .views import render

    config = _config()
    # without --host: every configured host (a newcomer's second host must show up here)
    selected = config.select_hosts(",".join(config.hosts) if host_spec is None else host_spec)
    look = lambda conn: probe(conn, config.job_for(conn.name).engine)  # noqa: E731
    try:
        results, failures = on_hosts(config, selected, look, render.trusted_key), {}
    except MultiHostError as e:
        results, failures = e.results, e.failures
    rows, problems = [], []
    for h in selected:
        where = (
            "local" if h.is_local else f"{h.user + '@' if h.user else ''}{h.address}:{h.port or 22}"
        )
        res = results.get(h.name)
        if h.name in failures or not res.ok:
            problems.append((h.name, str(failures[h.name]) if h.name in failures else res.detail))
            check = "FAILED (below)"
        else:
            check = "ok: " + res.detail
        rows.append(
            (
                h.name + (" (default)" if h.name == config.default_host else ""),
                where,
                h.remote_dir,
                listens(config.server_for(h.name), config.job_for(h.name).engine.kind),
                check,
            )
        )
    render.hosts_table(rows, problems)
    return ExitCode.FAILED if problems else ExitCode.OK


def deploy(host_spec: str | None, *, dry_run: bool = False) -> int:
    from .ops import deploy as deploy_mod
    from .views import render

    config = _config()
    releases = {
        h.name: deploy_mod.build_release(config, host=h.name)
        for h in config.select_hosts(host_spec)
    }
    _run(
        config,
        host_spec,
        lambda conn: deploy_mod.deploy_host(
            conn, config, dry_run=dry_run, release=releases[conn.name]
        ),
        render.deploy_result,
    )
    return ExitCode.OK


def rollback(host_spec: str | None, *, to: str | None = None) -> int:
    from .ops import deploy as deploy_mod
    from .views import render

    if to is not None and not to.strip():  # `--to "$ID"` with ID unset: never a plain rollback
        raise UsageError(
            "--to: given empty; leave it out to go back to the last release a runner ran from, "
            "or name one (`invoke rollback --to ID`: an unknown ID lists the host's releases)"
        )
    config = _config()
    _run(config, host_spec, lambda conn: deploy_mod.rollback_host(conn, to), render.rollback_result)
    return ExitCode.OK


def restart(
    host_spec: str | None,
    *,
    hard=False,
    drain=False,
    dry_run=False,
    force_gpu=False,
    with_server=True,
    **flags,
) -> int:
    from functools import partial

    from .ops import control
    from .views import render, render_restart

    config = _config()
    # bad flags: exit 2 before any host is touched
    run_flags = control.parse_run_flags(config, **flags)
    if stage_of(run_flags.stage).needs_vllm:
        _measure_possible(config, host_spec, run_flags)
    if stage_of(run_flags.stage).trains:
        _train_possible(config, host_spec, run_flags)
    one = partial(
        _restart_host,
        config=config,
        flags=run_flags,
        hard=hard,
        drain=drain,
        force_gpu=force_gpu,
        with_server=with_server,
    )
    asked = {}
    if not dry_run and len(config.select_hosts(host_spec)) > 1:
        # every host asked first, nothing changed: one that would refuse leaves them all as they are
        try:
            asked = _all_would_accept(config, host_spec, partial(one, dry_run=True))
        except KeyboardInterrupt:  # only asked so far: nothing to see through
            render.note("interrupted before any host was touched")
            return ExitCode.FAILED
    doing = (
        "with what it was asked (a restart begun ends on its own; `invoke status` shows where "
        "the job is)"
    )
    if stage_of(run_flags.stage).label:  # the way back, where another stage was asked for
        doing += f"; `invoke restart --stage {FIRST.name}` takes it back to {FIRST.doing}"
    act = partial(one, dry_run=dry_run, asked=asked)
    outcome = render_restart.restart_outcome
    said = partial(render_restart.restart_result, drain=drain)
    return _run_to_end(config, host_spec, act, said, doing, outcome)


def _all_would_accept(config, host_spec, dry) -> dict:
    """Every host's dry run (what it would do, refused where it would refuse), at once; one line
    naming each host that would refuse, and why, before any host is touched."""
    from .ops.hosts import on_hosts
    from .views import render

    hosts = config.select_hosts(host_spec)
    try:
        return on_hosts(config, hosts, dry, render.trusted_key)
    except MultiHostError as e:
        why = "; ".join(f"{name} would refuse: {err}" for name, err in e.failures.items())
        names = ", ".join(h.name for h in hosts)
        err = DeployToolError(f"restart refused, no host touched ({names}): {why}", e.code)
        err.details = e.details
        if len(e.failures) == 1:
            err.host = next(iter(e.failures))  # a command its fix names acts on that host
        raise err from None


def _restart_host(conn, *, config, flags, hard, drain, dry_run, force_gpu, with_server, asked=None):
    """One request; where the job's server must be started (again) for the stage, the host sees
    the rest through alone (the model's load included) and this follows it. `asked`: each host's
    dry run, where every host was asked first."""
    from .ops import control
    from .ops import server as server_mod
    from .views import render, render_restart, render_server

    managed = server_mod.manages_engine(config, conn.name)
    preview = None
    if not dry_run and (flags.may_raise() or flags.force):
        # a raised target, and the settings --force mixes, said before the host acts (before the
        # old runner is stopped): the host's word, asked once first
        preview = (asked or {}).get(conn.name) or control.restart(
            conn, flags, hard=hard, dry_run=True
        )
        preview.host = conn.name
        render_restart.raised_targets(preview)
        render_restart.forced_mix(dataclasses.replace(preview, dry_run=False))
    answer = control.restart(
        conn,
        flags,
        hard=hard,
        drain=drain,
        dry_run=dry_run,
        force_gpu=force_gpu,
        recover=config.recover_for(conn.name),
        keys=config.server_keys(conn.name),
        server=config.server_for(conn.name) if managed else None,
        keep_server=not with_server,
        on_status=None if dry_run else render_restart.Restarting(conn.name, flags.grace, drain),
    )
    if answer.mode == "switching":
        answer = server_mod.follow_restart(
            conn,
            answer,
            note=render.note,
            progress=render.plain_note,
            on_status=render_restart.Restarting(conn.name, flags.grace, drain),
            stopped=render_server.server_stopped,
            started=render_server.server_started,
        )
    answer.job_differs = control.differs(config, conn.name, answer.deployed_job)
    if preview is not None and preview.forced_mix:
        answer.forced_mix = None  # said above, before it went ahead
    return answer


def _train_possible(config, host_spec: str | None, flags) -> None:
    """The train stage trains what job.train describes; with --baseline the draft it makes is the
    one measured next, so server.draft must name it. Said before any host is touched."""
    from remote.common.jobspec import TRAINED

    for h in config.select_hosts(host_spec):
        why = None
        if not config.job_for(h.name).train:
            why = (
                "hosts.yaml has no job.train: the trainer and its settings (docs/train.md); it "
                "runs speculators' trainer, which needs torch on the host (a GPU host)"
            )
        elif flags.baseline and config.server_for(h.name).draft.get("model") != TRAINED:
            why = (
                "--baseline measures the trained draft next, and server.draft.model is not "
                f"`{TRAINED}`: set it, or train first and measure with `restart --stage draft`"
            )
        if why:
            raise UsageError(f"--stage {flags.stage} on {h.name}: {why}")
    if flags.baseline:  # the stages that follow, asked now
        _measure_possible(
            config, host_spec, dataclasses.replace(flags, stage=stage_of(flags.stage).followed_by)
        )


def _measure_possible(config, host_spec: str | None, flags) -> None:
    """The measuring stages (draft, baseline) measure the job's own vLLM server, which deploytool starts
    (with the draft, or without it); `--baseline` is the watcher's to start. Said before any host
    is touched."""
    from remote.common.jobspec import flag_value

    from .ops.server import manages_engine

    stage = stage_of(flags.stage)
    for h in config.select_hosts(host_spec):
        rec, spec = config.recover_for(h.name), config.server_for(h.name)
        why = None
        if config.job_for(h.name).engine.kind == "simulate":
            what = "to measure" if stage.needs_draft else "to measure a baseline against"
            why = (
                f"the built-in simulated engine has no draft {what}: the stage needs vLLM, the "
                "job's own server (hosts.yaml job.engine.kind: openai and server:; docs/draft.md)"
            )
        elif not manages_engine(config, h.name):
            why = (
                "it measures the job's own vLLM server, started by deploytool: hosts.yaml "
                "server: on the port of job.engine.base_url"
            )
        elif stage.needs_draft and not spec.draft:
            why = "hosts.yaml names no draft: set server.draft.model (a folder on the host or a model id)"
        if why:
            raise UsageError(f"--stage {flags.stage} on {h.name}: {why}")
        if not flags.baseline:
            continue
        if not (rec.watches("server") and rec.watches("runner")):
            why = "the host's watcher starts the baseline, and `recover:` has it off"
        elif flag_value(spec.args, "--speculative-config") is not None:
            why = "server.args gives a --speculative-config of its own: every server has a draft"
        if why:
            e = UsageError(
                f"--baseline on {h.name}: {why}; measure the draft, then `invoke restart --stage "
                "baseline`"
            )
            e.host = h.name  # the command it names acts on this host
            raise e


def server_start(host_spec: str | None) -> int:
    from .ops import server as server_mod
    from .views import render, render_server

    config = _config()
    # a host whose job is the built-in engine has nothing to start (as `hosts` says): said, not
    # asked of the host, where vLLM is not there to find; nothing to do is no failure of the user's
    names = [h.name for h in config.select_hosts(host_spec)]
    simulated = [n for n in names if config.job_for(n).engine.kind == "simulate"]
    for name in simulated:
        render_server.needs_none(name, "no server to start")
    served = [n for n in names if n not in simulated]
    if not served:
        return ExitCode.OK
    _run(
        config,
        ",".join(served),
        lambda conn: server_mod.start(
            conn,
            config.server_for(conn.name),
            progress=render.plain_note,
            recover=config.recover_for(conn.name),
        ),
        render_server.server_started,
    )
    return ExitCode.OK


def server_stop(host_spec: str | None, *, grace: float = GRACE_S) -> int:
    from .ops import server as server_mod
    from .views import render_server

    config = _config()
    _run(config, host_spec, lambda conn: server_mod.stop(conn, grace), render_server.server_stopped)
    return ExitCode.OK


def server_status(host_spec: str | None) -> int:
    from .ops import server as server_mod
    from .ops.dpgroup import problems
    from .views import render_server

    config = _config()
    # the host is asked all the same: a server someone left up there still holds its GPUs
    simulated = {
        h.name
        for h in config.select_hosts(host_spec)
        if config.job_for(h.name).engine.kind == "simulate"
    }
    show = lambda r: render_server.server_status(r, simulated=r.host in simulated)  # noqa: E731
    results = _run(config, host_spec, server_mod.server_state, show)
    render_server.group_problems(problems(config, results))
    return ExitCode.OK


def stop(host_spec: str | None, *, grace: float = GRACE_S, drain: bool = False) -> int:
    from .ops import control
    from .views import render_restart

    config = _config_to_look("a stop")
    if grace < 0:
        raise UsageError(f"--grace: expected seconds, 0 or more, got {grace:g}")

    def one(conn):
        return control.stop_and_follow(
            conn, grace, drain, render_restart.Stopping(conn.name, grace, drain)
        )

    doing = "stopping the job (`invoke status` shows when it has)"
    return _run_to_end(config, host_spec, one, render_restart.stop_result, doing)


def status(host_spec: str | None, *, as_json: bool = False) -> int:
    from .ops import control
    from .views import render

    config = _config_to_look("status")
    look = lambda conn: control.job_status(conn, config)  # noqa: E731
    if as_json:
        render.status_json(_run(config, host_spec, look, lambda r: None))
    else:
        _run(config, host_spec, look, render.status_screen)
    return _looked(config, ExitCode.OK)


def tail(host_spec: str | None, *, once: bool = False, log: bool = False) -> int:
    from .ops import follow
    from .views import render, typed
    from .views import tail as tail_view

    config = _config_to_look("tail")
    hosts = config.select_hosts(host_spec)
    view = tail_view.choose(render.console, once=once, log=log, live=render.console.is_terminal)
    code = follow.watch(config, hosts, view, once=once, log=log, out=render.console, say=typed.say)
    return _looked(config, code)


def plan(
    host_spec: str | None,
    *,
    tokens_per_dataset: str,
    tokens_per_s: str | None = None,
    apply: bool = False,
) -> int:
    from .ops import planning
    from .views import render

    config = _config()
    target, rate = planning.parse_plan_args(tokens_per_dataset, tokens_per_s)
    results = _run(
        config,
        host_spec,
        lambda conn: planning.plan_host(conn, target, rate, config.server_for(conn.name)),
        render.plan_result,
    )
    if apply:  # a restart as typed with these caps: said, checked and started as restart does
        for name, r in results.items():
            caps = [f"{ds}={row.cap}" for ds, row in r.datasets.items()]
            render.note(f"[bold]{name}[/]: applying caps {', '.join(caps)}")
            restart(name, cap=caps)
    return ExitCode.OK


def _pulled(folder: str | None, config) -> str:
    """The folder pull writes to and export reads: as typed, else `pulled/` beside hosts.yaml (one
    copy of the job's records, from whatever folder of the project a command is typed in)."""
    import os

    if folder is None:
        return os.path.abspath(_beside_config(config, "pulled"))
    return os.path.abspath(folder) if folder else folder  # typed empty: refused where it is used


def _beside_config(config, name: str) -> str:
    """A default output's path: beside hosts.yaml, said from the folder the command is typed in
    (`report-gpu1.html` at the project's root, `../report-gpu1.html` in a folder of it); a
    hosts.yaml elsewhere (DEPLOYTOOL_CONFIG) gets the whole path, not `../../tmp/x/report.html`."""
    import os

    rel = os.path.relpath(config.base_dir / name)
    return (
        rel
        if not rel.startswith(os.path.join(os.pardir, os.pardir))
        else str(config.base_dir / name)
    )


def pull(host_spec: str | None, *, to=None, refetch=False, hidden=False, free=False) -> int:
    from .ops.out_paths import writable
    from .ops.pull_hidden import pull_all
    from .views import render

    if free and not hidden:
        raise UsageError(
            "--free frees the hidden-states files pulled: give it with --hidden-states"
        )
    config = _config()
    dest = writable(_pulled(to, config), "--to", folder=True)
    results = _run(
        config,
        host_spec,
        lambda conn: pull_all(conn, dest, refetch, hidden, free),
        render.pull_result,
    )
    refused = [f"{h}:{n}" for h, r in results.items() for n in r.refused]
    if refused:
        e = DeployToolError(
            f"local copies differ from the host's files ({', '.join(refused)}): "
            "move them aside, or download them again: `invoke pull --refetch`"
        )
        e.host = ",".join(h for h, r in results.items() if r.refused)  # its fix acts on them
        raise e
    return ExitCode.OK


def export(
    host_spec: str | None,
    *,
    fmt: str = "specforge",
    out: str | None = None,
    drop: str | None = None,
    keep: str | None = None,
    datasets: str | None = None,
    per_turn: bool = False,
    whole: bool = False,
    mixed: bool = False,
    pulled: str | None = None,
    no_pull: bool = False,
) -> int:
    import shlex
    from pathlib import Path

    from .ops import export as export_mod
    from .ops.out_paths import folder_to_read, writable
    from .views import render

    config = _config()
    folder = pulled = _pulled(pulled, config)
    export_mod.check_format(fmt)  # before anything is pulled
    default = _beside_config(config, export_mod.default_name(config, host_spec, fmt))
    target = writable(default if out is None else out, "--out")
    on = f" --host {host_spec}" if host_spec else ""
    pull_first = f"(`invoke pull{on} --to {shlex.quote(folder)}`), or leave out --no-pull"
    if not no_pull:
        writable(pulled, "--pulled", folder=True)
    if per_turn and whole:
        raise UsageError("--per-turn and --whole: choose one")
    export_mod.effective_drop(fmt, per_turn, drop, keep)  # bad reasons: before anything is pulled
    wanted = export_mod.wanted_datasets(config, config.select_hosts(host_spec), datasets)
    if no_pull:
        folder_to_read(pulled, "--pulled", f"pull into it first {pull_first}")
    else:
        pull(",".join(wanted), to=pulled)  # the new bytes first
    sources = export_mod.find_sources(Path(pulled), wanted)
    if not sources:
        of = ", ".join(f"{h}'s {', '.join(names)}" for h, names in wanted.items())
        if no_pull:
            raise UsageError(f"no pulled records of {of} in {folder}: pull them first {pull_first}")
        raise UsageError(
            f"no records of {of} on the host yet (pulled into {folder}): "
            f"`invoke status{on}` says what the job has done"
        )
    with render.bytes_progress(sum(s.path.stat().st_size for s in sources), "export") as step:
        result = export_mod.export(
            sources,
            target,
            fmt=fmt,
            per_turn=True if per_turn else (False if whole else None),
            mixed=mixed,
            advance=step,
            drop_flags=(drop, keep),
        )
    render.export_result(result)
    return ExitCode.OK


def report(host_spec: str | None, *, out: str | None = None) -> int:
    from remote.common.protocol import CtlReport

    from .ops import control
    from .ops.out_paths import writable
    from .views import render
    from .views import report as report_mod

    config = _config()
    hosts = config.select_hosts(host_spec)
    if out is not None and len(hosts) > 1:
        raise UsageError("--out names one file: give one --host, or leave --out out")
    targets = {
        h.name: writable(
            _beside_config(config, f"report-{h.name}.html") if out is None else out, "--out"
        )
        for h in hosts
    }

    def one(conn):
        data = control.call(conn, CtlReport(), timeout=1800)
        return conn.name, report_mod.write(data, targets[conn.name])

    _run(config, host_spec, one, render.report_written)
    return ExitCode.OK
