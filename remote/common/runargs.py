"""The runner's command-line flags: parsed on the host, built by deploytool (standard library only)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .jobspec import JOB_FILE, Caps
from .units import parse_cap, parse_dataset_list, parse_tokens


def _nonneg_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {n}")
    return n


def _wrap(fn):
    def parse(text):
        try:
            return fn(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-samples", type=_nonneg_int, help="target: the first N prompts of each dataset"
    )
    p.add_argument(
        "--cap",
        action="append",
        type=_wrap(parse_cap),
        default=[],
        metavar="DS=N",
        help="per-dataset override of --max-samples (repeatable)",
    )
    p.add_argument(
        "--max-tokens",
        type=_wrap(parse_tokens),
        metavar="T",
        help="per dataset, stop dispatching once response tokens reach T (10M, 500k)",
    )
    p.add_argument(
        "--datasets", type=_wrap(parse_dataset_list), metavar="B2,B3", help="run only these"
    )
    p.add_argument(
        "--grace", type=float, default=30.0, help="seconds in-flight requests get on SIGTERM"
    )
    p.add_argument(
        "--force", action="store_true", help="resume even if generation settings changed"
    )
    p.add_argument("--root", type=Path, help="remote_dir (default: the one this release lives in)")
    p.add_argument("--job", type=Path, help=f"job spec (default: {JOB_FILE} in this release)")


def run_argv(
    max_samples=None, caps=(), max_tokens=None, datasets=None, grace=30.0, force=False
) -> list[str]:
    """The `run` flags for these values: the one place both sides build a runner's command line."""
    out: list[str] = []
    if max_samples is not None:
        out += ["--max-samples", str(max_samples)]
    for name, n in caps:
        out += ["--cap", f"{name}={n}"]
    if max_tokens is not None:
        out += ["--max-tokens", str(max_tokens)]
    if datasets:
        out += ["--datasets", ",".join(datasets)]
    out += ["--grace", f"{grace:g}"]
    if force:
        out.append("--force")
    return out


def argv_of(a) -> list[str]:
    """The `run` flags of parsed `run` arguments (the watcher starts a runner again with them)."""
    return run_argv(a.max_samples, a.cap, a.max_tokens, a.datasets, a.grace, a.force)


def parse_run_argv(argv: list[str]) -> argparse.Namespace:
    """`run` flags back into arguments, with the defaults add_run_args states."""
    p = argparse.ArgumentParser(add_help=False)
    add_run_args(p)
    return p.parse_args(argv)


def caps_from_args(a) -> Caps:
    return Caps(
        max_samples=a.max_samples, caps=dict(a.cap), max_tokens=a.max_tokens, datasets=a.datasets
    )
