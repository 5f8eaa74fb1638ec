"""wire.py's ExitCode, the one table of exit statuses (the envelope, strict fields and faults are
unit/remote/common/test_protocol's): every exit status on the host is its, named
where it can be imported, and held equal to it in release.py and preflight.py, which are sent to
the host as source alone and import nothing of the package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from remote.common.wire import ExitCode
from remote.host import preflight, release

REMOTE = Path(__file__).resolve().parents[4] / "remote"

# each function whose return value is a process's exit status
EXITS = {
    "cli.py": ("main",),
    "host/watcher/watch.py": ("run", "main"),
    "host/commands/ctl.py": ("switch_command",),
    "host/release.py": ("main",),
    "host/preflight.py": ("main",),
}


def test_the_standalone_files_say_the_tables_values():
    assert (release.EXIT_OK, release.EXIT_FAILED, release.EXIT_BAD_INPUT) == (
        ExitCode.OK,
        ExitCode.FAILED,
        ExitCode.BAD_INPUT,
    )
    assert preflight.EXIT_OK == ExitCode.OK


def literal_exits(path: Path, names: tuple[str, ...]) -> list[str]:
    """The numbers written as an exit status in those functions: returned, or kept as `code`."""
    found = []
    for fn in ast.walk(ast.parse(path.read_text())):
        if not isinstance(fn, ast.FunctionDef) or fn.name not in names:
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Return) and node.value is not None:
                value = node.value
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "code" for t in node.targets
            ):
                value = node.value
            else:
                continue
            found += [
                f"{fn.name}:{n.lineno} {n.value}"
                for n in ast.walk(value)
                if isinstance(n, ast.Constant) and type(n.value) is int
            ]
    return found


@pytest.mark.parametrize("rel", sorted(EXITS))
def test_no_exit_status_is_a_bare_number(rel):
    assert literal_exits(REMOTE / rel, EXITS[rel]) == []
