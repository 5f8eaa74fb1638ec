"""The host side: runs on the GPU host with its own Python (standard library + what vLLM installs).

The rooms, and which way imports run (tests/test_layering.py holds it):

    cli.py, __main__.py, run_inference.py   `python -m remote ...`: the one table from a request to
                                            its handler; wires job and host
    common/   what both sides share, standard library only; the one part deploytool imports
        protocol  every host command as a typed request (its flags, each default once) and the parser
                  made from them; flags: what a request is made of; answers: each command's typed
                  answer; wire: the envelope, typed faults, the strict codec
        jobspec   the typed job spec (defaults stated once), caps, the host's paths, token names
        status    status.json, typed (nested parts too)
        state     the other files under run/, typed (pid files, control.json, supervise.json), and
                  the one atomic write and tolerant codec every replaced file goes through
        units, metrics (vLLM's /metrics), nvsmi (nvidia-smi), procinfo (/proc), pull,
        notify (job.notify's command), recover (recover: and the watcher's rules: budget, wedge clock)
    job/      the runner's process: one job through the engine
        runner      wiring and lifecycle only
        scheduler   caps, token budgets, reload, which prompt next (datasets: one dataset's run)
        ledger      each prompt's state, one owner, transitions as checked methods
        dispatcher  the request window, one request, retries, requeues, the job's own faults
        writer      records and errors onto disk, holding them while the disk is full
        control     run/control.json (live re-cap, drain, grace), the stop state, housekeeping
                    clocks; telemetry (/metrics, GPUs);
        alerts      stalled / engine_down -> notify; status_builder (pure); rates (one window)
        engine (openai; engine_kinds picks it or the simulate stand-in), pool (servers), prompts,
        outputs, history, plan, report,
        watched (run/watch.json as the runner reads it)
    host/     process control on the host, in floors (every import points down):
        facts       kill, gpu, strays (finding runners), engines (a server's engine processes),
                    intent (run/supervise.json: what should run), boot (recover.on_boot's systemd
                    unit), release and preflight (sent by deploytool as source: they import nothing
                    of this package)
        processes   runner_process (start, stop, re-cap the runner), server (start, check, stop
                    vLLM), smoke: the mechanism the watcher and the commands share
        watcher     keepers (its per-process decisions), watch (the watcher process)
        commands    ctl (start/restart/stop/files), server_commands (start/smoke/stop): record
                    intent, then keep a watcher (supervised); jobstate (`ctl status`, only looks)

    deploytool -> remote.common <- remote.job
                                <- remote.host      (job and host never import each other)
"""
