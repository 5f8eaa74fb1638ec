"""The invoke collection: thin typed tasks that call deploytool functions and render the answer."""

from __future__ import annotations

import functools
import sys

from invoke import Collection, Exit, Task, task

from remote.common.flags import helps
from remote.common.protocol import GRACE_S, CtlRestart, CtlStop

from . import commands
from .errors import DeployToolError, ExitCode
from .views import typed

HOST_HELP = "host name(s) from hosts.yaml, comma-separated (default: default_host)"


class HostTask(Task):
    """`--host`/`-H` for the host flag, with its help; `-h` always stays help; no guessed one-letter
    flags (`-a` for --max-tokens would surprise at 3 a.m.)."""

    def __init__(self, *args, help=None, **kwargs):
        super().__init__(*args, help={"host": HOST_HELP, **(help or {})}, **kwargs)

    def arg_opts(self, name, default, taken_names):
        opts = super().arg_opts(name, default, taken_names)
        opts["names"] = opts["names"][:1] + (["H"] if name == "host" else [])
        return opts


def _cli(fn):
    """Expected failures -> one line on stderr and the right exit code; bugs keep their traceback."""

    @functools.wraps(fn)
    def wrapper(c, *args, **kwargs):
        try:
            code = fn(c, *args, **kwargs)
        except DeployToolError as e:
            for line in e.details:
                print(f"  | {line}", file=sys.stderr)
            raise Exit(f"error: {typed.say(str(e), e.host)}", int(e.code)) from None
        except KeyboardInterrupt:  # a command that follows the host says what goes on there itself
            print(
                "interrupted (Ctrl-C): nothing here is left half-written; run it again to finish",
                file=sys.stderr,
            )
            raise Exit(code=int(ExitCode.FAILED)) from None
        if code:
            raise Exit(code=int(code))

    return wrapper


def _task(**kwargs):
    """One of our tasks: a HostTask whose expected failures are one line (_cli)."""
    return lambda fn: task(klass=HostTask, **kwargs)(_cli(fn))


@_task()
def hosts(c, host=None):
    """List the configured hosts and check each one is reachable."""
    return commands.hosts(host)


@_task(help={"dry_run": "show what would change, change nothing"})
def deploy(c, host=None, dry_run=False):
    """Sync remote/ and the job spec to the host as a new release; switch `current` atomically."""
    return commands.deploy(host, dry_run=dry_run)


@_task(help={"to": "release id (default: the previous one)"})
def rollback(c, host=None, to=None):
    """Point `current` back to the previous release."""
    return commands.rollback(host, to=to)


RUN_FLAGS = (
    "max_samples", "cap", "max_tokens", "datasets", "reset_caps", "stage", "eval_samples",
    "baseline", "grace", "force", "force_gpu",
)  # fmt: skip
# the host's own words for its flags
RUN_HELP = helps(CtlRestart, *RUN_FLAGS, "hard", "drain", "dry_run")


@_task(
    iterable=["cap"],
    help={
        **RUN_HELP,
        "no_server": "do not start the vLLM server when it is down (refused while it is down, "
        "unless --force)",
    },
)
def restart(
    c,
    host=None,
    max_samples=None,  # None, not "": a value typed empty (`--datasets ""`) is bad input
    cap=None,
    max_tokens=None,
    datasets=None,
    reset_caps=False,
    stage=None,
    eval_samples=None,
    baseline=False,
    grace=GRACE_S,
    hard=False,
    drain=False,
    dry_run=False,
    force=False,
    force_gpu=False,
    no_server=False,
):
    """Apply new caps live, or stop the job cleanly and start it again; resume where it was.

    The job keeps its caps on the host: a flag changes only what it names, and a restart without
    cap flags runs the caps the job had (`all`/`none` clear one, --reset-caps every one)."""
    return commands.restart(
        host,
        hard=hard,
        drain=drain,
        dry_run=dry_run,
        force_gpu=force_gpu,
        with_server=not no_server,
        max_samples=max_samples,
        cap=cap or (),
        max_tokens=max_tokens,
        datasets=datasets,
        reset_caps=reset_caps,
        stage=stage,
        eval_samples=eval_samples,
        baseline=baseline,
        grace=grace,
        force=force,
    )


@_task(help=helps(CtlStop, "grace", "drain"))
def stop(c, host=None, grace=GRACE_S, drain=False):
    """Stop the job: SIGTERM, grace period, SIGKILL of the whole process tree."""
    return commands.stop(host, grace=grace, drain=drain)


@_task(help={"json": "print the raw status as JSON"})
def status(c, host=None, json=False):
    """One screen: job state, per-dataset done/target, tokens, rate, ETA, errors."""
    return commands.status(host, as_json=json)


@_task(
    help={
        "once": "print one snapshot and exit",
        "log": "logs/runner.log instead of the progress view: its last 20 lines, then each new one",
    }
)
def tail(c, host=None, once=False, log=False):
    """Live per-dataset progress until the run ends; Ctrl-C detaches and never stops the job."""
    return commands.tail(host, once=once, log=log)


@_task(
    help={
        "tokens_per_dataset": "response-token target per dataset (10M, 500k)",
        "tokens_per_s": "tok/s the ETA is reckoned at (else the job's rate, as status gives it)",
        "apply": "restart (live where possible) with these per-dataset caps (the job's other caps "
        "stay)",
    }
)
def plan(c, tokens_per_dataset=None, host=None, tokens_per_s=None, apply=False):
    """Per-dataset caps and ETA from measured (else estimated) mean response length."""
    if tokens_per_dataset is None:  # a flag like every other task's: `plan --help` is help
        raise Exit(
            "error: plan needs a target: `invoke plan --tokens-per-dataset 10M` "
            "(`invoke plan --help` lists its flags)",
            2,
        )
    return commands.plan(
        host,
        tokens_per_dataset=tokens_per_dataset,
        tokens_per_s=tokens_per_s,
        apply=apply,
    )


@_task(
    help={
        "to": "local folder, one subfolder per host (default: pulled/ beside hosts.yaml)",
        "refetch": "download again any file whose local copy differs from the host's (every byte compared)",
        "hidden-states": "also the hidden-states stage's rows and files (into TO/HOST/hidden_states/)",
        "free": "with --hidden-states: delete each file on the host once its copy here has the "
        "host's sha256 (the rows stay counted there)",
    }
)
def pull(c, host=None, to=None, refetch=False, hidden_states=False, free=False):
    """Copy data/outputs/ back, only what is new."""
    return commands.pull(host, to=to, refetch=refetch, hidden=hidden_states, free=free)


@_task(
    help={
        "format": "specforge (default) | speculators (needs return_token_ids) | sharegpt",
        "out": "the training file to write (default: export-<format>.jsonl beside hosts.yaml); "
        "its manifest is written beside it as <out>.manifest.json",
        "drop": "also leave out: length (replies cut at max_tokens; left out by default except in "
        "speculators rows), empty, original_answers, role_order",
        "keep": "keep what the format leaves out by default: empty (no answer text), length, "
        "original_answers (the dataset's own answers, trained), role_order (SpecForge cuts them)",
        "datasets": "only these datasets (default: every dataset of the job)",
        "per-turn": "one row per generated reply, its history before it (SpecForge: "
        "data.train_only_last_turn: true). Default: chosen by itself where a conversation holds "
        "the dataset's own answers (whole rows would train them)",
        "whole": "whole-conversation rows only: a conversation holding the dataset's own answers "
        "is then left out (original_answers)",
        "mixed": "allow records made with different settings in one file",
        "pulled": "the local folder pull writes to (default: pulled/ beside hosts.yaml)",
        "no-pull": "export what is already pulled, without asking the host for new records",
    }
)
def export(
    c,
    host=None,
    format="specforge",
    out=None,  # None, not "": a value typed empty is refused, never read as not given
    drop=None,
    keep=None,
    datasets=None,
    per_turn=False,
    whole=False,
    mixed=False,
    pulled=None,
    no_pull=False,
):
    """Pull the new records, then write one training file for SpecForge, speculators or ShareGPT."""
    return commands.export(
        host,
        fmt=format,
        out=out,
        drop=drop,
        keep=keep,
        datasets=datasets,
        per_turn=per_turn,
        whole=whole,
        mixed=mixed,
        pulled=pulled,
        no_pull=no_pull,
    )


@_task(help={"out": "the HTML file to write (default: report-<host>.html beside hosts.yaml)"})
def report(c, host=None, out=None):
    """One self-contained HTML page: tokens/s over time, response lengths, finish reasons, errors, caps."""
    return commands.report(host, out=out)


@_task(name="start")
def server_start(c, host=None):
    """Start the vLLM server from hosts.yaml `server:`, wait until it answers, smoke-test it."""
    return commands.server_start(host)


@_task(name="stop", help={"grace": f"seconds before SIGKILL (default {GRACE_S:g})"})
def server_stop(c, host=None, grace=GRACE_S):
    """Stop the vLLM server and every worker it left; wait for its GPU memory to be free."""
    return commands.server_stop(host, grace=grace)


@_task(name="status")
def server_status(c, host=None):
    """Server up/down, model, uptime, and running/waiting requests, KV cache, tokens/s from /metrics."""
    return commands.server_status(host)


ns = Collection(
    report,
    hosts,
    deploy,
    rollback,
    restart,
    stop,
    status,
    tail,
    plan,
    pull,
    export,
    Collection("server", server_start, server_stop, server_status),
)
