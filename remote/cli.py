"""`python -m remote ...`: the command line made from protocol.py's request types, and the one table
from each request type to its handler (standard library only: it runs on the host).

A handler takes the host's paths and its typed request and returns its typed answer, printed in the
envelope; a HostFault becomes the envelope's fault. `run` and `watch` are processes: their handler
returns the exit status.
"""

from __future__ import annotations

import importlib
import json
import sys

from .common import protocol as P
from .common.flags import Request
from .common.jobspec import JOB_FILE, Paths, default_root, release_dir
from .common.wire import (
    FAULTS,
    PROTOCOL,
    REQUEST_FLAG,
    ExitCode,
    HostFault,
    envelope,
    fault_envelope,
    from_wire,
)

# request type -> "module:function", imported only when called (`ctl status` stays quick)
HANDLERS: dict[type[Request], str] = {
    P.RunJob: "remote.cli:run",
    P.Watch: "remote.cli:watch",
    P.CtlStart: "remote.host.commands.ctl:start_command",
    P.CtlRestart: "remote.cli:restart",
    P.CtlSwitch: "remote.host.commands.ctl:switch_command",
    P.CtlStop: "remote.host.commands.ctl:stop_command",
    P.CtlStatus: "remote.cli:look",
    P.CtlFiles: "remote.queries.pulled_files:answer",  # reads the job's outputs and prompts
    P.CtlKeys: "remote.host.commands.ctl:keys_command",
    P.CtlFree: "remote.job.hidden.store:free_command",  # the stage's files: the job's room
    P.CtlPlan: "remote.queries.target_caps:answer",  # reads the job's outputs: the job's room
    P.CtlReport: "remote.queries.report_data:gather",
    P.ServerStart: "remote.host.commands.server_commands:start_command",
    P.ServerCheck: "remote.host.processes.server_process:check",
    P.ServerSmoke: "remote.host.commands.server_commands:smoke_command",
    P.ServerStop: "remote.host.commands.server_commands:stop_command",
    P.ServerStatus: "remote.host.processes.server_process:server_state",
}


def handler(cls: type[Request]):
    module, name = HANDLERS[cls].split(":")
    return getattr(importlib.import_module(module), name)


def run(paths: Paths, req: P.RunJob, argv: list[str]) -> int:
    from .host.facts import intent
    from .host.processes import runner_process
    from .job.loop import runner

    job = (req.job or release_dir() / JOB_FILE).expanduser()
    if req.changes_caps():  # started by hand with cap flags: a change to the job's caps, kept
        if not runner_process.lock_is_free(paths):  # as a command's is, and only for a runner
            raise HostFault("busy", f"another runner is already running in {paths.root}")
        intent.keep_caps(paths, runner_process.caps_change(paths, req, job)[1])
    return runner.main(paths, job, grace=req.grace, force=req.force, argv=argv)


def watch(paths: Paths, req: P.Watch, argv: list[str]) -> int:
    from .host.watcher import watch

    return watch.main(paths.root)


def restart(paths: Paths, req: P.CtlRestart):
    """`ctl restart`: the host's, where a target it would move over records no status counts is
    counted from the records (the queries' room reads them)."""
    from .host.commands.ctl import restart_command

    out = restart_command(paths, req)
    if any(row.done_most is not None for row in out.caps.values()):
        from .common.jobspec import deployed_spec
        from .queries.recount import count_in_targets

        count_in_targets(paths, out, deployed_spec())
    return out


def look(paths: Paths, req: P.CtlStatus):
    """`ctl status`: the host's look (jobstate), its counts taken again from the records where the
    runner was killed after its last status write (the queries' room reads them)."""
    from .common.status import GONE
    from .host.commands.jobstate import job_status

    st = job_status(paths, req)
    if st.message == GONE and st.stage_spec.makes_answers:
        from .common.jobspec import deployed_spec
        from .queries.recount import recount

        recount(paths, st, deployed_spec())
    return st


def read_request(stdin) -> P.Request:
    """The request deploytool sent on stdin (wire.request_json), typed strictly."""
    try:
        data = json.loads(stdin.readline())  # one line: a request may be answered again
        got = data.get("protocol", "7 or older")
        if got != PROTOCOL:  # its fields may mean another thing here: nothing is done
            raise HostFault(
                "usage",
                f"a request of protocol {got}; this host's release speaks {PROTOCOL}: nothing was "
                "done",
                fix="`invoke deploy` from the deploytool you use, or use the one that deployed",
            )
        cls = P.BY_COMMAND[tuple(data["command"])]
        return from_wire(cls, data["request"])
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise HostFault("usage", f"{REQUEST_FLAG}: not a request of this release ({e})") from None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv == [REQUEST_FLAG]:  # deploytool's way: typed data, no command line to parse
            req, root = read_request(sys.stdin), None
        else:  # a person's way
            req, root = P.parse(argv)
        paths = Paths((root or default_root()).expanduser().resolve())
        fn = handler(type(req))
        if type(req).answer is None:
            return fn(paths, req, argv)
        while getattr(req, "again", False):  # a look each line, one process for all of them
            print(json.dumps(envelope(fn(paths, req))), flush=True)
            if not sys.stdin.readline():
                return ExitCode.OK
        out = envelope(fn(paths, req))
        code = ExitCode.OK
    except HostFault as e:
        if argv[:1] in (["run"], ["watch"]):  # a process, often started by hand: words, not JSON
            print(f"error: {e.fault.message}", file=sys.stderr)
            return FAULTS[e.fault.code]
        out, code = fault_envelope(e.fault), FAULTS[e.fault.code]
    print(json.dumps(out))
    return code
