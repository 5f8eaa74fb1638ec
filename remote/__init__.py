"""The host side: runs on the GPU host with its own Python (standard library + what vLLM installs).

The rooms, and which way imports run (tests/test_layering.py holds it):

    cli.py, __main__.py, run_inference.py   `python -m remote ...`: the one table from a request to
                                            its handler; wires job and host
    common/   what both sides share, standard library only; the one part deploytool imports
        protocol  every host command as a typed request (its flags, each default once) and the parser
                  made from them; flags: what a request is made of; answers: each command's typed
                  answer; wire: the envelope, typed faults, an answer read strictly
        jobspec   the typed job spec (defaults stated once), the host's paths, token names
        keys      hosts.yaml's keys, each declared once on its dataclass (default and check), and
                  the one check per kind of value the validator takes from there
        caps      the job's caps (run/caps.json) and the parsers of their flags and token counts
        status    status.json, typed (nested parts too)
        speed     the job's tokens per second as every command says it
        records   the output record, typed (Record, Reply, Turn), a prompt's error line, a hidden-states
                  row (RowLine), and the file listing pull compares
        state     the other files under run/, typed (pid files, control.json, supervise.json)
        codec     the one atomic write every replaced file goes through, the one decoder (tolerant
                  for files, strict for the wire), JSON lines read, a log line appended, a file lock
        metrics (vLLM's /metrics), machine (nvidia-smi, the model's config.json), procinfo (/proc),
        notify (job.notify's command), recover (recover: and the watcher's rules: budget, wedge clock)
    job/      the runner's process: one job through the engine, in rooms stacked from the bottom
      store/    the files on disk: prompts, outputs (records, their headers), conversation (whole
                conversations), ledger (each prompt's state, one owner, checked transitions),
                datasets (one dataset's run), writer (records and errors onto disk, holding them
                while the disk is full), history (run/history.jsonl), rates (one window), counts
                (a dataset's counts in every stage that asks for items)
      hidden/   the hidden-states stage's files: hsfile (one file, checked before it counts), store
                (a dataset's rows.jsonl and hs_<n> files, each row once through any kill), rows
                (which rows of the kept records)
      train/    the train stage's parts the runner calls: prepare (the data folder the trainer reads,
                made once, in the trainer's Python), command (the trainer's command), progress (its
                output read), epoch_steps (an epoch's steps known in advance), checkpoints (its save
                folder read back; the copy vLLM serves)
      engine/   client (the OpenAI engine), stream (a streamed answer put back together; its
                watchdog), kept_tokens (the tokens of unfinished answers, kept across a stop),
                continuation (resuming one), pool (the servers), simulate (the stand-in), kinds
                (which of them a job gets)
      observe/  status_builder (pure), telemetry (/metrics, GPUs), alerts (stalled in every stage,
                engine_down -> notify), watched (run/watch.json as the runner reads it)
      loop/     runner (the one process lifecycle, whichever stage), stage (the interface a stage
                gives the runner, and what every stage shares: its servers watched), generate (the
                generation stage), hidden_stage (the hidden-states stage), train_stage (a draft
                trained by a supervised trainer), draft_stage (a draft measured on held-out
                prompts, and the baseline), scheduler (caps, budgets, reload, which prompt next),
                dispatcher (the request window, one request, retries, the job's own faults),
                control_requests (run/control.json: live re-cap, drain, grace; the stop state),
                own_process (the runner's lock, pid file and log)
    queries/  what the host is asked about the job's files: target_caps (`plan`), report_data,
              report_stage, report_drafts (`report`); read only
    host/     process control on the host, in rooms stacked the same way (every import points down):
      facts/      kill, gpu, strays (finding runners), engines (a server's engine processes),
                  intent (run/supervise.json: what should run), boot (recover.on_boot's systemd unit),
                  made_with (which datasets' records were made with other settings)
      processes/  runner_process (start, stop, re-cap the runner), server_process (start, check,
                  stop vLLM), smoke, stage_switch (the server started again for a restart's stage,
                  carried out whole by a detached process): the mechanism the watcher and the
                  commands share
      watcher/    keepers (its per-process decisions), watch (the watcher process)
      commands/   ctl (start/restart/stop/files, the swap's process), server_commands (start/smoke/stop): record intent,
                  then keep a watcher (supervised); jobstate (`ctl status`, only looks)
      release.py, preflight.py  sent by deploytool as source: they import nothing of this package

    deploytool -> remote.common <- remote.job <- remote.queries
                                <- remote.host      (job and host never import each other)
"""
