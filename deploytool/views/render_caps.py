"""The caps table a restart prints: each dataset's cap, what the command changed marked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from .progress import fmt_tokens as _tok

if TYPE_CHECKING:
    from remote.common.answers import CapRow, RestartAnswer
    from remote.common.jobspec import Caps


def _cap(n: int | None, selected: bool = True) -> str:
    if not selected:
        return "not run"
    return "all" if n is None else f"{n:,}"


def _budget(t: int | None) -> str:
    return "none" if t is None else _tok(t)


def caps_table(
    caps: dict[str, CapRow],
    out: Console,
    kept: Caps | None = None,
    was: Caps | None = None,
    *,
    planned: bool = False,
) -> None:
    """The job's caps, a row per dataset, what this command changed marked `was → now`. `planned`:
    a dry run, whose done/target are the last run's (the new targets come at the start)."""
    if not caps:
        return
    t = Table("dataset", "cap", "done", "target", "state", box=None, pad_edge=False)
    short = {}  # cap -> datasets whose file has fewer prompts than it
    for name, d in caps.items():
        cap = _cap(d.cap, d.selected)
        if d.changed:
            cap = f"[bold]{_cap(d.was, d.was_selected)} → {cap}[/]"
        known = d.prompts > 0 and not planned
        t.add_row(
            name,
            cap,
            f"{d.done:,}" if d.prompts else "-",
            (f"{d.target:,}" + ("*" if d.short_of_cap else "")) if known else "-",
            d.state or "-",
        )
        if d.short_of_cap and known:
            short.setdefault(d.cap, []).append(name)
    out.print(t)
    if kept is not None and was is not None and kept.max_tokens != was.max_tokens:
        out.print(f"  max-tokens [bold]{_budget(was.max_tokens)} → {_budget(kept.max_tokens)}[/]")
    elif kept is not None and kept.max_tokens is not None:
        out.print(f"  max-tokens {_budget(kept.max_tokens)} per dataset")
    if not any(d.changed for d in caps.values()) and (kept is None or kept == was):
        out.print("  caps unchanged (the job's own: flags change only what they name)")
    for cap, names in short.items():
        out.print(
            f"  * {', '.join(names)}: fewer prompts than the cap of {cap:,}: "
            "the target is every prompt of the file"
        )


def raised_targets(r: RestartAnswer, out: Console) -> None:
    """Before a restart that runs more than the job had: say which datasets grow."""
    for name, d in r.caps.items():
        if d.raised:
            more = f"{_cap(d.was, d.was_selected)} → {_cap(d.cap)}"
            out.print(f"[yellow]{r.host}: {name}'s target goes up ({more} prompts)[/]")
