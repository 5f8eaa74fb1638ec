"""Rich output for the command layer. Library code returns data; only this module prints it."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .deploy import DeployResult

console = Console(highlight=False)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def deploy_result(r: DeployResult, out: Console | None = None) -> None:
    out = out or console
    verb = "would deploy" if r.dry_run else "deployed"
    if not r.changed:
        out.print(f"[bold]{r.host}[/]: nothing changed (release {r.release} is current); 0 bytes of file data sent")
        return
    out.print(f"[bold]{r.host}[/]: {verb} release {r.release} (was {r.previous or 'none'})")
    for label, items, style in (("added", r.added, "green"), ("modified", r.modified, "yellow"),
                                ("removed", r.removed, "red"), ("prompts", r.prompts, "cyan")):
        for item in items:
            out.print(f"  [{style}]{label:8}[/] {item}")
    sent = "would send" if r.dry_run else "sent"
    extra = f"; pruned {', '.join(r.pruned)}" if r.pruned else ""
    out.print(f"  {sent} {_size(r.bytes_sent)} in {r.seconds:.2f}s{extra}")


def failures(errs: dict[str, Exception], out: Console | None = None) -> None:
    out = out or console
    for host, e in errs.items():
        out.print(f"[bold red]{host}[/]: FAILED: {e}")


def hosts_table(rows: list[tuple[str, str, str, str]], out: Console | None = None) -> None:
    t = Table("host", "address", "remote_dir", "check")
    for row in rows:
        t.add_row(*row)
    (out or console).print(t)
