"""restart / stop / status: validate flags here, decide and act on the host (`python -m remote ctl`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from remote.common.answers import RestartAnswer, StopAnswer
from remote.common.recover import RecoverSpec
from remote.common.status import JobStatus
from remote.common.units import parse_cap, parse_dataset_list, parse_tokens

from .config import Config
from .connectors import Connector
from .errors import RemoteError, UsageError

NOT_DEPLOYED = 97


@dataclass(frozen=True)
class RunFlags:
    """Caps for a run, validated against hosts.yaml before anything on a host is touched."""

    max_samples: int | None = None
    caps: tuple[tuple[str, int], ...] = ()
    max_tokens: int | None = None
    datasets: tuple[str, ...] | None = None
    grace: float = 30.0
    force: bool = False

    def argv(self) -> list[str]:
        from remote.common.runargs import run_argv

        return run_argv(
            self.max_samples, self.caps, self.max_tokens, self.datasets, self.grace, self.force
        )


def parse_run_flags(
    config: Config,
    *,
    max_samples=None,
    caps=(),
    max_tokens=None,
    datasets=None,
    grace=30.0,
    force=False,
) -> RunFlags:
    known = config.job.dataset_names()
    try:
        ms = None
        if max_samples not in (None, ""):
            ms = int(str(max_samples))
            if ms < 0:
                raise ValueError(f"--max-samples must be >= 0, got {ms}")
        parsed_caps = tuple(parse_cap(c) for c in (caps or ()))
        mt = parse_tokens(max_tokens) if max_tokens not in (None, "") else None
        ds = parse_dataset_list(datasets) if datasets else None
        g = float(grace)
        if g < 0:
            raise ValueError(f"--grace must be >= 0, got {grace}")
    except ValueError as e:
        msg = str(e)
        if "invalid literal for int()" in msg:
            msg = f"--max-samples expects a whole number, got {max_samples!r}"
        raise UsageError(msg) from None
    unknown = [n for n in list(ds or []) + [c[0] for c in parsed_caps] if n not in known]
    if unknown:
        raise UsageError(f"unknown dataset {', '.join(unknown)}; hosts.yaml has {', '.join(known)}")
    return RunFlags(ms, parsed_caps, mt, tuple(ds) if ds else None, g, bool(force))


def ctl(conn: Connector, *args: str, timeout: float | None = None) -> dict:
    """Run `python -m remote ctl ARGS` from the host's current release; return its JSON answer."""
    return call(conn, "ctl", *args, timeout=timeout)


def call(conn: Connector, *args: str, timeout: float | None = None) -> dict:
    """Run `python -m remote ARGS` from the host's current release; return its JSON answer."""
    script = '[ -d current ] || exit 97; cd current && exec "$@"'
    res = conn.run(
        ["sh", "-c", script, "sh", *conn.python("-S", "-m", "remote", *args)],
        cwd=conn.remote_dir,
        timeout=timeout,
    )
    if res.exit_code == NOT_DEPLOYED or (
        not res.out and ("can't cd" in res.err or "No such file or directory" in res.err)
    ):
        raise RemoteError(f"nothing deployed in {conn.remote_dir}: run `invoke deploy` first")
    try:
        answer = res.answer()
    except ValueError:
        raise RemoteError(
            f"`remote {' '.join(args[:2])}` failed (exit {res.exit_code}): {res.why()}"
        ) from None
    if not answer.get("ok"):
        if answer.get("preflight"):
            raise RemoteError(
                "nothing was stopped: " + preflight_message(conn.name, answer["preflight"])
            )
        raise RemoteError(answer.get("error", "failed"), details=answer.get("log") or ())
    return answer


def preflight_message(host: str, problem: dict) -> str:
    """One line with the fix, for a host whose Python cannot run the job's engine."""
    mods = ", ".join(problem["missing"])
    why = "; ".join(problem["missing"].values())
    return (
        f"the host's python ({problem['python']}) cannot import {mods} ({why}), which job.engine.kind "
        f"{problem['engine']} needs: point hosts.{host}.python (or defaults.python) at the Python of the "
        "vLLM environment (e.g. ~/vllm-venv/bin/python)"
    )


def restart(
    conn: Connector,
    flags: RunFlags,
    *,
    hard=False,
    drain=False,
    dry_run=False,
    force_gpu=False,
    recover: RecoverSpec | None = None,
) -> RestartAnswer:
    args = ["restart", *flags.argv()]
    if recover is not None:
        args += ["--recover", json.dumps(recover.to_dict())]
    args += (
        ["--hard"] * hard
        + ["--drain"] * drain
        + ["--dry-run"] * dry_run
        + ["--force-gpu"] * force_gpu
    )
    return RestartAnswer.from_dict(dict(ctl(conn, *args), host=conn.name))


def stop(conn: Connector, grace: float = 30.0, drain: bool = False) -> StopAnswer:
    answer = ctl(conn, "stop", "--grace", f"{grace:g}", *(["--drain"] if drain else []))
    return StopAnswer.from_dict(dict(answer, host=conn.name))


def status(conn: Connector) -> JobStatus:
    return replace(JobStatus.from_dict(ctl(conn, "status")), host=conn.name)
