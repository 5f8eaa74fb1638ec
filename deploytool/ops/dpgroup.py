"""vLLM data-parallel groups across hosts: which hosts form one, and what a dead rank means for it.

A group is a head (serves HTTP) and `--headless` ranks, all started with the same
`--data-parallel-size N` (N > 1), `--data-parallel-address` and `--data-parallel-rpc-port`. When one
rank's engine dies the head keeps serving and every request routed to that rank hangs; the ranks
cannot rejoin one by one, so the fix is always the whole group, stopped and started together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from remote.common.jobspec import flag_value

from ..config import Config

if TYPE_CHECKING:  # types only: answers load with the commands that build them
    from remote.common.answers import ServerState


@dataclass(frozen=True)
class Rank:
    host: str
    key: tuple[str, str]  # (address, rpc port): which group
    first: int  # its first data-parallel rank
    local: int  # how many ranks it runs
    headless: bool

    @property
    def label(self) -> str:
        if self.local == 1:
            return f"rank {self.first}"
        return f"ranks {self.first}-{self.first + self.local - 1}"


def rank_of(config: Config, host: str) -> Rank | None:
    spec = config.server_for(host)
    args = spec.args
    try:
        size = int(flag_value(args, "--data-parallel-size") or flag_value(args, "-dp") or 1)
        first = int(
            flag_value(args, "--data-parallel-start-rank")
            or flag_value(args, "--data-parallel-rank")
            or 0
        )
        local = int(
            flag_value(args, "--data-parallel-size-local") or (1 if spec.headless else size)
        )
    except ValueError:
        return None  # vLLM itself refuses such arguments at start
    if size <= 1:
        return None
    key = (
        flag_value(args, "--data-parallel-address") or "",
        flag_value(args, "--data-parallel-rpc-port") or "",
    )
    headless = spec.headless or "--headless" in args
    return Rank(host, key, first, local, headless)


def group_of(config: Config, host: str, selected: list[str]) -> list[Rank]:
    """The hosts of `host`'s group, head first. The built-in local host counts only when named."""
    me = rank_of(config, host)
    if me is None:
        return []
    ranks = [
        r
        for name, h in config.hosts.items()
        if (name in selected or not h.is_local)
        and (r := rank_of(config, name)) is not None
        and r.key == me.key
    ]
    return sorted(ranks, key=lambda r: (r.headless, r.first))


def _problem(rank: Rank, r: ServerState) -> str | None:
    pids = ", ".join(str(p.pid) for p in r.engines_gone)
    if r.engines_gone:
        return f"{rank.host}: {rank.label} engine gone (pid {pids})"
    if r.died:
        alive = " (its engine processes still run)" if r.leftovers else ""
        return f"{rank.host}: {rank.label} server died{alive}"
    if not r.up:
        return f"{rank.host}: {rank.label} not running"
    return None


def problems(config: Config, results: dict[str, ServerState]) -> list[str]:
    """One line per broken group among the hosts asked about, with the fix; [] when all is well."""
    out, seen = [], set()
    for host in results:
        group = group_of(config, host, list(results))
        if not group or group[0].key in seen:
            continue
        seen.add(group[0].key)
        asked = [g for g in group if g.host in results]
        found = [p for g in asked if (p := _problem(g, results[g.host]))]
        if not found or not any(results[g.host].up for g in asked):
            continue  # all down is a stopped group, not a broken one
        names = ",".join(g.host for g in group)
        out.append(
            "; ".join(found) + "; the group must be restarted: "
            f"invoke server.stop --host {names} && invoke server.start --host {names}"
        )
    return out
