"""What each command does: load config, act on hosts, render. Returns an exit code or raises."""

from __future__ import annotations

from . import deploy as deploy_mod
from . import render
from .config import load_config
from .errors import DeployToolError, ExitCode, MultiHostError
from .hosts import on_hosts, probe


def _run(config, host_spec, fn, show):
    """on_hosts + render every host's result, failures included, then re-raise one error for all."""
    hosts = config.select_hosts(host_spec)
    try:
        results = on_hosts(config, hosts, fn)
    except MultiHostError as e:
        for name in e.results:
            show(e.results[name])
        if len(hosts) == 1:
            raise
        render.failures(e.failures)
        raise DeployToolError(f"{len(e.failures)} of {len(hosts)} hosts failed: {', '.join(e.failures)}", e.code) from None
    for name in results:
        show(results[name])
    return results


def hosts(host_spec: str | None) -> int:
    config = load_config()
    selected = config.select_hosts(host_spec)
    rows = []
    failed = False
    for h in selected:
        where = "local" if h.is_local else f"{h.user + '@' if h.user else ''}{h.address}:{h.port or 22}"
        try:
            res = on_hosts(config, [h], probe)[h.name]
            check = ("ok: " if res["ok"] else "FAILED: ") + res["detail"]
            failed |= not res["ok"]
        except MultiHostError as e:
            check, failed = f"FAILED: {e.failures[h.name]}", True
        rows.append((h.name + (" (default)" if h.name == config.default_host else ""), where, h.remote_dir, check))
    render.hosts_table(rows)
    return ExitCode.REMOTE_FAILED if failed else ExitCode.OK


def deploy(host_spec: str | None, *, dry_run: bool = False) -> int:
    config = load_config()
    release = deploy_mod.build_release(config)
    _run(config, host_spec, lambda conn: deploy_mod.deploy_host(conn, config, dry_run=dry_run, release=release),
         render.deploy_result)
    return ExitCode.OK


def rollback(host_spec: str | None, *, to: str | None = None) -> int:
    config = load_config()

    def show(r):
        render.console.print(f"[bold]{r['host']}[/]: current -> {r['current']} (was {r['previous']})")

    _run(config, host_spec, lambda conn: dict(deploy_mod.rollback_host(conn, to), host=conn.name), show)
    return ExitCode.OK
