"""Rendering a runner's status.json: rich (live) and plain (one line per snapshot). Pure functions of
(status, now), so tests render into a StringIO console with an injected clock."""

from __future__ import annotations

import time

from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

TERMINAL = {"finished", "failed", "stopped"}
STALE_AFTER = 30.0  # seconds without a status update before we ask whether the runner is alive


def fmt_tokens(n) -> str:
    n = float(n or 0)
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}"


def fmt_duration(seconds) -> str:
    if seconds is None:
        return "?"
    s = max(0, int(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    if h >= 24:
        return f"{h // 24}d{h % 24:02d}h"
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def health(st: dict, now: float) -> tuple[str, bool]:
    """The health line, and whether anything in it needs attention."""
    eng = st.get("engine") or {}
    parts, bad = [], False
    if eng.get("reachable", True):
        parts.append(f"engine {eng.get('kind', '?')} reachable")
    else:
        down = now - eng["down_since"] if eng.get("down_since") else None
        parts.append(f"ENGINE UNREACHABLE for {fmt_duration(down)}: {eng.get('last_error') or '?'}")
        bad = True
    ds = (st.get("datasets") or {}).values()
    new = sum(d.get("new_records", 0) for d in ds)
    length = sum(d.get("finish_length", 0) for d in ds)
    errors = st.get("errors", 0)
    parts.append(f"errors {errors}")
    bad |= bool(errors)
    parts.append(f"finish=length {length / new:.1%}" if new else "finish=length -")
    if st.get("retries"):
        parts.append(f"retries {st['retries']}")
    if st.get("stalled"):
        parts.append("STALLED: nothing finished for a while")
        bad = True
    upd = st.get("updated_at")
    if upd and st.get("state") not in TERMINAL and now - upd > STALE_AFTER:
        parts.append(f"status not updated for {fmt_duration(now - upd)}")
        bad = True
    return " · ".join(parts), bad


def notices(st: dict) -> list[str]:
    """Things the user should act on that are not failures: prompt files replaced under a running job."""
    changed = [n for n, d in (st.get("datasets") or {}).items() if d.get("prompts_changed")]
    if changed and st.get("state") not in TERMINAL:
        return [f"{', '.join(changed)}: prompts changed on the host; `invoke restart` to use them"]
    return []


def totals(statuses: list[dict]) -> dict:
    tok = sum(s.get("completion_tokens", 0) for s in statuses)
    rate = sum(s.get("tokens_per_s", 0) or 0 for s in statuses)
    etas = [s.get("eta_s") for s in statuses if s.get("state") not in TERMINAL]
    return {"tokens": tok, "tokens_per_s": rate, "eta_s": max(etas) if etas and None not in etas else (None if etas else 0)}


def host_view(host: str, st: dict | None, now: float, note: str | None = None):
    if st is None:
        return Text(f"{host}: no status yet" + (f" ({note})" if note else ""), style="yellow")
    table = Table(box=None, pad_edge=False, expand=False, show_edge=False)
    for col, kw in (("dataset", {}), ("", {"width": 24}), ("done/target", {"justify": "right"}),
                    ("tokens", {"justify": "right"}), ("tok/s", {"justify": "right"}), ("ETA", {"justify": "right"}),
                    ("state", {})):
        table.add_column(col, **kw)
    for name, d in (st.get("datasets") or {}).items():
        target = max(d.get("target", 0), 0)
        bar = ProgressBar(total=max(target, 1), completed=min(d.get("done", 0), target) if target else 1, width=24,
                          complete_style="green" if d.get("state") == "complete" else "cyan")
        eta = "-" if d.get("state") == "complete" else fmt_duration(d.get("eta_s"))
        table.add_row(name, bar, f"{d.get('done', 0):,}/{target:,}", fmt_tokens(d.get("completion_tokens")),
                      fmt_tokens(d.get("tokens_per_s")), eta, d.get("state", "?"))
    started = st.get("started_at")
    state = st.get("state", "?")
    state_style = {"finished": "green", "failed": "red", "stopped": "yellow"}.get(state, "bold")
    head = Text.assemble((f"{host}", "bold"), ": ", (state, state_style),
                         f"  pid {st.get('pid', '?')}  in flight {st.get('in_flight', 0)}/{st.get('concurrency', '?')}")
    total = Text(f"total {fmt_tokens(st.get('completion_tokens'))} tokens · {fmt_tokens(st.get('tokens_per_s'))} tok/s"
                 f" · ETA {fmt_duration(st.get('eta_s')) if state not in TERMINAL else '-'}"
                 f" · elapsed {fmt_duration(now - started) if started else '?'}")
    line, bad = health(st, now)
    parts = [head, table, total, Text(line, style="red" if bad else "dim")]
    parts += [Text(n, style="yellow") for n in notices(st)]
    if st.get("message"):
        parts.append(Text(st["message"], style="yellow"))
    if note:
        parts.append(Text(note, style="yellow"))
    return Group(*parts)


def view(snapshots: dict[str, dict | None], notes: dict[str, str | None], now: float | None = None):
    now = time.time() if now is None else now
    parts = [host_view(h, st, now, notes.get(h)) for h, st in snapshots.items()]
    present = [s for s in snapshots.values() if s]
    if len(snapshots) > 1 and present:
        t = totals(present)
        parts.append(Text(f"all hosts: {fmt_tokens(t['tokens'])} tokens · {fmt_tokens(t['tokens_per_s'])} tok/s · "
                          f"ETA {fmt_duration(t['eta_s'])}", style="bold"))
    return Group(*parts)


def plain_line(host: str, st: dict | None, now: float, note: str | None = None) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(now))
    if st is None:
        return f"{stamp} {host}: no status yet" + (f" ({note})" if note else "")
    ds = " ".join(f"{n} {d.get('done', 0)}/{d.get('target', 0)}" for n, d in (st.get("datasets") or {}).items())
    line, _ = health(st, now)
    eta = fmt_duration(st.get("eta_s")) if st.get("state") not in TERMINAL else "-"
    out = (f"{stamp} {host}: {st.get('state')} | {ds} | {fmt_tokens(st.get('completion_tokens'))} tok "
           f"{fmt_tokens(st.get('tokens_per_s'))} tok/s ETA {eta} | {line}")
    return out + "".join(f" | {n}" for n in notices(st)) + (f" | {note}" if note else "")
