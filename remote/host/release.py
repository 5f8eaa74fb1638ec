"""Host side of deploy and rollback. Standard library only: deploytool sends its source, after
draft_copy.py's, as `python3 -c SOURCE session|plan|apply|rollback ROOT ...`, so it works before
any release exists on the host.

apply reads a tar stream on stdin holding only the changed files; the rest are hard-linked from the
current release. A release appears under its final name only when complete (rename), and `current`
switches by renaming a new symlink over it: a reader sees the old release or the new, never a mix.
"""

import contextlib
import json
import os
import shutil
import sys
import tarfile
import time

try:  # a module of the package
    from .draft_copy import (  # noqa: F401 (the tests' names too)
        DRAFT_COPIES,
        DRAFT_HASHES,
        _draft_begin,
        _draft_complete,
        _draft_drop_old,
        _draft_plan,
        _draft_switch,
        _drop_drafts_left_over,
        _pid_alive,
        _place_draft_file,
        _read_json,
        _safe_member,
        _write_json,
        _write_synced,
        sha256_file,
    )
except ImportError:  # sent as source after draft_copy.py's own: its names are defined above
    pass

MANIFEST = "MANIFEST.json"
HISTORY = "history.json"
# exit statuses: remote.common.wire.ExitCode's, which this file, sent alone, cannot import
# (tests/unit/remote/common/test_wire.py holds them equal)
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


def _current_id(root):
    try:
        return os.path.basename(os.readlink(os.path.join(root, "current")))
    except OSError:
        return None


def _start_time(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
        return int(data[data.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _live(root, pidfile):
    """The pid file's record if its process still runs (same pid, same start time), else None."""
    rec = _read_json(os.path.join(root, "run", pidfile), {}) or {}
    pid = rec.get("pid")
    if isinstance(pid, int) and _pid_alive(pid) and _start_time(pid) == rec.get("start_time"):
        return rec
    return None


def _in_use(root):
    """Release ids a live runner, server or watcher runs from: never pruned (the watcher imports
    what it needs to restart them from its own release)."""
    recs = [_live(root, name) for name in ("runner.pid", "server.pid", "watcher.pid")]
    return {os.path.basename((r.get("release") or "").rstrip("/")) for r in recs if r}


def _running_prompts(root):
    """Prompt files (relative paths) a live runner has open, read from its status: replacing one changes
    nothing for it until `restart` reloads it."""
    rec = _live(root, "runner.pid")
    st = _read_json(os.path.join(root, "run", "status.json"), {}) or {}
    if rec is None or st.get("pid") != rec["pid"]:
        return {}
    files = [d.get("prompts_file") or {} for d in (st.get("datasets") or {}).values()]
    return {f["path"]: rec["pid"] for f in files if f.get("path")}


def _has_records(path):
    """A whole line in it (a torn one alone is cut by the runner: no record)."""
    try:
        with open(path, "rb") as f:
            return any(b"\n" in chunk for chunk in iter(lambda: f.read(1 << 16), b""))
    except OSError:
        return False


def _line_ids(root, names):
    """Per dataset of `names` with records named by line number, the bytes of the prompt file they
    were made from (run/line-ids/<DS>.json: size, sha256): deploy refuses a file they do not begin."""
    out = {}
    for name in names:
        kept = _read_json(os.path.join(root, "run", "line-ids", name + ".json"))
        if isinstance(kept, dict) and _has_records(
            os.path.join(root, "data", "outputs", name + ".jsonl")
        ):
            out[name] = kept
    return out


def _made_with(root, names):
    """Per dataset of `names` with records (or answers in flight, which a stop's grace may still
    write), the settings its meta file says they were made with: deploy compares the job's."""
    rec = _live(root, "runner.pid")
    st = _read_json(os.path.join(root, "run", "status.json"), {}) or {}
    mine = rec is not None and st.get("pid") == rec["pid"]
    flying = {n for n, d in (st.get("datasets") or {}).items() if mine and d.get("in_flight")}
    out = {}
    for name in names:
        outputs = os.path.join(root, "data", "outputs")
        meta = _read_json(os.path.join(outputs, name + ".meta.json"))
        made = name in flying or _has_records(os.path.join(outputs, name + ".jsonl"))
        if isinstance(meta, dict) and made:
            forced = meta.get("accepted")
            # a --force's settings, none made yet: the grace writes its answers in flight with them
            out[name] = forced if name in flying and isinstance(forced, dict) else meta
    return out


def _prompt_hash(root, rel, keep=True):
    """sha256 of a prompt file, cached by (size, mtime) so big files are not re-read on every deploy
    (`keep`: False for a dry run, which writes nothing on the host, its cache included)."""
    path = os.path.join(root, rel)
    try:
        st = os.stat(path)
    except OSError:
        return None
    cache_path = os.path.join(root, "data", "prompts", ".hashes.json")
    cache = _read_json(cache_path, {}) or {}
    key = "%d:%d" % (st.st_size, st.st_mtime_ns)
    hit = cache.get(rel)
    if isinstance(hit, dict) and hit.get("key") == key and isinstance(hit.get("sha256"), str):
        return hit["sha256"]
    digest = sha256_file(path)
    cache[rel] = {"key": key, "sha256": digest}
    try:
        if keep:
            _write_json(cache_path, cache)
    except OSError:
        pass
    return digest


UPLOAD_END = "end"  # jobspec.UPLOAD_END: the upload's last member (one without it was cut short)


def plan(root, args):
    """What the host has: current release id and manifest, releases, prompt hashes."""
    root = os.path.expanduser(root)
    cur = _current_id(root)
    manifest = _read_json(os.path.join(root, "releases", cur, MANIFEST), {}) if cur else {}
    rel_dir = os.path.join(root, "releases")
    releases = _releases(rel_dir) if os.path.isdir(rel_dir) else []
    keep = not args.get("dry_run")
    prompts = {p: _prompt_hash(root, p, keep) for p in args.get("prompts", [])}
    drafts, drafts_pending = _draft_plan(root, args.get("drafts", []), keep)
    return {
        "root": os.path.abspath(root),
        "current": cur,
        "manifest": manifest.get("files", {}),
        "releases": releases,
        "prompts": prompts,
        "running_prompts": _running_prompts(root),
        "made_with": _made_with(root, args.get("datasets", [])),
        "line_ids": _line_ids(root, args.get("datasets", [])),
        "job": _job(os.path.join(root, "releases"), cur),
        "drafts": drafts,
        "drafts_pending": drafts_pending,
    }


def _clean_stale_tmp(rel_dir):
    for d in os.listdir(rel_dir):
        if d.startswith(".tmp-"):
            try:
                pid = int(d.rsplit("-", 1)[1])
            except ValueError:
                pid = 0
            if not pid or not _pid_alive(pid):
                shutil.rmtree(os.path.join(rel_dir, d), ignore_errors=True)


def _switch(root, rid, how=None):
    link = os.path.join(root, "current")
    tmp = "%s.tmp-%d" % (link, os.getpid())
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.path.join("releases", rid), tmp)
    os.replace(tmp, link)
    hist_path = os.path.join(root, "releases", HISTORY)
    hist = _read_json(hist_path, []) or []
    entry = dict(how or {}, id=rid, time=time.time())
    if hist:
        entry["before"] = hist[-1].get("time")
    hist.append(entry)
    _write_json(hist_path, hist[-100:])


def _prune(root, keep):
    rel_dir = os.path.join(root, "releases")
    cur = _current_id(root)
    protect = _in_use(root) | {cur}
    entries = _read_json(os.path.join(rel_dir, HISTORY), []) or []
    back = _back_from(entries, rel_dir, cur)
    if back:
        protect.add(back["id"])  # what rollback goes back to
    ran_from = _ran(root)
    ran, _ = _last_ran(rel_dir, cur, entries, ran_from)
    if ran:
        protect.add(ran)  # likewise, where a runner ran
    dirs = _releases(rel_dir)
    # kept first: releases a runner ran from (rollback goes back along them; one deployed and
    # never run is the one to lose), each most recently used first (history order, then mtime
    # for releases older than the history)
    order, used = {h["id"]: i for i, h in enumerate(entries)}, set(ran_from)

    def kept_first(d):
        return (d in used, order.get(d, -1), os.stat(os.path.join(rel_dir, d)).st_mtime)

    dirs.sort(key=kept_first, reverse=True)
    removed = []
    for d in dirs[keep:]:
        if d not in protect:
            shutil.rmtree(os.path.join(rel_dir, d), ignore_errors=True)
            removed.append(d)
    return removed


def _unpack(stream, root, tmp, prompts_allowed, prompt_tmps, draft=None, cache=None):
    """The upload: release files into tmp; prompt files beside their targets as .part files (their
    (part, target, rel) appended to prompt_tmps as they are written, for the caller to clean up);
    a draft's files each in its place as it arrives. The upload ends with an `end` member: a tar
    cut short by the laptop (a file it could not read) reads as a shorter whole one, and would
    otherwise be switched to."""
    ended = False
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for m in tar:
            if m.name == UPLOAD_END:
                ended = True
                continue
            parts = _safe_member(m.name)
            if not m.isfile():
                continue
            if parts[0] == "draft" and draft:
                _place_draft_file(root, draft, "/".join(parts[1:]), tar.extractfile(m), cache)
                continue
            data = tar.extractfile(m).read()
            if parts[0] == "release":
                dst = os.path.join(tmp, *parts[1:])
            elif parts[0] == "prompts":
                rel = "/".join(parts[1:])
                if rel not in prompts_allowed:
                    raise ValueError("upload names a prompt file the job does not: %r" % rel)
                target = os.path.join(root, rel)
                dst = os.path.join(
                    os.path.dirname(target),
                    ".%s.%d.part" % (os.path.basename(target), os.getpid()),
                )
                prompt_tmps.append((dst, target, rel))
            else:
                raise ValueError("unexpected upload member %r" % m.name)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            _write_synced(dst, data)
            os.chmod(dst, 0o644)
    if not ended:
        raise ValueError("the upload was cut short: nothing was switched")


def _complete(tmp, rid, files, base_dir, base):
    """Hard-link what was not uploaded from the base release, check every hash, write the manifest."""
    for path in files:
        dst = os.path.join(tmp, *_safe_member(path))
        if os.path.exists(dst):
            continue
        src = os.path.join(base_dir, path) if base_dir else None
        if not src or not os.path.exists(src):
            raise ValueError("file %s is neither uploaded nor in release %s" % (path, base))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        try:
            # releases are never modified in place, so sharing inodes is safe
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
    for path, digest in files.items():
        if sha256_file(os.path.join(tmp, *path.split("/"))) != digest:
            raise ValueError("file %s arrived corrupted (hash mismatch)" % path)
    _write_json(os.path.join(tmp, MANIFEST), {"id": rid, "files": files, "created": time.time()})


RESTARTING = "restarting"  # intent.RESTARTING: the runner's `why` while a restart holds the job


def _refuse_during_restart(root):
    """A restart between its stop and its start (it holds the job's lock, run/supervise.lock):
    `current` switched now is not what it starts (the release it runs from), so a rollback said
    done while the restart started the release it left, whose records then mixed the settings.
    One killed midway has let go of the lock: nothing to wait for."""
    import fcntl

    runner = (_read_json(os.path.join(root, "run", "supervise.json"), {}) or {}).get("runner")
    if not isinstance(runner, dict) or runner.get("wanted") or runner.get("why") != RESTARTING:
        return
    try:
        fd = os.open(os.path.join(root, "run", "supervise.lock"), os.O_RDWR)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise ValueError(
            "a restart on this host is stopping the runner to start the release deployed when it "
            "was typed; nothing was changed: run this again once it has ended (`invoke status` "
            "shows it)"
        ) from None
    except OSError:
        return  # no locks on this filesystem: nothing is guarded there
    finally:
        os.close(fd)


def apply(root, args, stream):
    """Build releases/<id> from the upload + hard links to the base release; switch current; prune.
    A draft's files go to a version folder of their own, switched to with the release."""
    root = os.path.expanduser(root)
    _refuse_during_restart(root)
    for d in ("releases", "data/prompts", "data/outputs", DRAFT_COPIES, "run", "logs"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    with _one_at_a_time(root):  # held already where the folder was there before
        return _apply(root, args, stream)


def _apply(root, args, stream):
    rid, files, base = args["id"], args["files"], args.get("base")
    rel_dir = os.path.join(root, "releases")
    _clean_stale_tmp(rel_dir)
    final = os.path.join(rel_dir, rid)
    tmp = os.path.join(rel_dir, ".tmp-%s-%d" % (rid, os.getpid()))
    os.makedirs(tmp)
    prompt_tmps = []
    draft, cache = _draft_begin(root, args.get("draft"))
    try:
        try:
            _unpack(stream, root, tmp, args.get("prompts", []), prompt_tmps, draft, cache)
            if draft:
                _draft_complete(root, draft, cache)
        finally:
            if draft:
                _write_json(os.path.join(root, DRAFT_HASHES), cache)
        if not os.path.isdir(final):
            _complete(tmp, rid, files, os.path.join(rel_dir, base) if base else None, base)
            os.rename(tmp, final)
        else:
            shutil.rmtree(tmp)  # same content already on the host: reuse it
        for part, target, _ in prompt_tmps:
            os.replace(part, target)
        previous = _current_id(root)
        if draft:
            _draft_switch(root, draft)
        _switch(root, rid)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for part, _, _ in prompt_tmps:
            if os.path.exists(part):
                os.unlink(part)
        raise
    if draft:
        _draft_drop_old(root, draft["folder"], cache)
    _drop_drafts_left_over(root, draft, cache)
    removed = _prune(root, int(args.get("keep", 5)))
    placed = [rel for _, _, rel in prompt_tmps]
    return {"current": rid, "previous": previous, "prompts": placed, "pruned": removed}


class BadRelease(ValueError):
    """A release the user named that the host cannot go to (exit 2: bad input)."""


def _releases(rel_dir):
    return sorted(
        d
        for d in os.listdir(rel_dir)
        if not d.startswith(".") and os.path.isdir(os.path.join(rel_dir, d))
    )


def _named(rel_dir, to, cur):
    """The release `to` names: its id or a unique prefix of one."""
    have = _releases(rel_dir)
    if to in have:
        return to
    hits = [d for d in have if d.startswith(to)]
    if len(hits) == 1:
        return hits[0]
    listed = ", ".join(d + (" (current)" if d == cur else "") for d in have) or "none"
    if hits:
        raise BadRelease("%r names %d releases: %s" % (to, len(hits), ", ".join(hits)))
    raise BadRelease("no release %r on the host; its releases: %s" % (to, listed))


def _back_from(hist, rel_dir, cur, newer=()):
    """The release that ran before the one that runs. History entries are linked: each to the one
    that was current when it was switched to (`before`), a rollback to the entry it went back to
    (`at`), so a second rollback goes one further back instead of returning where the first came
    from, and a rollback after a deploy goes to what ran before that deploy."""
    by_time = {h.get("time"): i for i, h in enumerate(hist)}

    def resolve(i):  # a rollback's entry stands where the entry it went back to stands
        return None if i is None else by_time.get(hist[i].get("at"), i)

    def prev(i):  # an older history has no links: the entry before it
        return by_time.get(hist[i]["before"]) if "before" in hist[i] else (i - 1 if i else None)

    i, seen = resolve(len(hist) - 1) if hist else None, set()
    while i is not None and i not in seen:
        seen.add(i)
        i = resolve(prev(i))
        if i is not None and hist[i]["id"] not in (cur, *newer):
            if os.path.isdir(os.path.join(rel_dir, hist[i]["id"])):
                return hist[i]
    return None


def _ran(root):
    """The releases runners ran from, oldest first (run/ran.jsonl, which the runner writes once
    its checks pass). A runner of a release older than that file: its pid file's release, where its
    status says it got past starting."""
    ran = []
    try:
        with open(os.path.join(root, "run", "ran.jsonl"), "rb") as f:
            for line in f:
                try:
                    rid = json.loads(line).get("release")
                except (ValueError, AttributeError):
                    continue  # a line torn by a kill
                if isinstance(rid, str) and rid:
                    ran.append(rid)
    except OSError:
        pass
    rec = _read_json(os.path.join(root, "run", "runner.pid"), {}) or {}
    st = _read_json(os.path.join(root, "run", "status.json"), {}) or {}
    rid = os.path.basename((rec.get("release") or "").rstrip("/"))
    got_past = st.get("pid") == rec.get("pid") and st.get("state") not in (
        None,
        "starting",
        "failed",
    )
    if not ran and rid and got_past:
        ran.append(rid)
    return ran


def _left(hist):
    """The releases the rollbacks at the end of the history left, one after another: a rollback
    never goes back to one of them (ids recur: a deploy of settings restored is a release that ran
    before, and a second rollback went back to the one the first had just left)."""
    left, j = set(), len(hist) - 1
    while j > 0 and "at" in hist[j]:  # a rollback's entry (a deploy's has no `at`)
        left.add(hist[j - 1].get("id"))
        j -= 1
    return left


def _last_ran(rel_dir, cur, hist, ran):
    """The last release a runner ran from, other than `cur` and those the rollbacks before left,
    still on the host, and where it stands in `ran`. After a rollback along `ran` (no runner
    since), from where that one stopped, so a second rollback goes further back."""
    last = hist[-1] if hist else {}
    end = len(ran)
    if last.get("id") == cur and last.get("ran_len") == len(ran):
        end = last.get("ran_at", end)
    passed = {cur, *_left(hist)}
    for i in range(end - 1, -1, -1):
        if ran[i] not in passed and os.path.isdir(os.path.join(rel_dir, ran[i])):
            return ran[i], i
    return None, None


def _job(rel_dir, rid):
    return _read_json(os.path.join(rel_dir, rid or "", "job.json"), {}) if rid else {}


def rollback(root, args):
    """To the last release a runner ran from (one deployed and refused never ran: going there
    would only repeat it), or, where none did, to the one deployed before; `to` names one."""
    root = os.path.expanduser(root)
    _refuse_during_restart(root)
    rel_dir = os.path.join(root, "releases")
    cur = _current_id(root)
    hist = _read_json(os.path.join(rel_dir, HISTORY), []) or []
    ran = _ran(root)
    how = {}
    if args.get("to"):
        target, why = _named(rel_dir, args["to"], cur), "named"
    else:
        target, at = _last_ran(rel_dir, cur, hist, ran)
        # linked as any rollback is (`at`: where it was last switched to), so that the fallback
        # below goes on from it, never forth again to the release just left
        where = [h.get("time") for h in hist if h.get("id") == target]
        why, how = "ran", {"ran_at": at, "ran_len": len(ran), "at": where[-1] if where else None}
        if target is None:
            # never forth to a release a runner ran from after this one (ids recur: a release
            # deployed again is the same one, its history entry newer than the one it replaced)
            after = max((i for i, r in enumerate(ran) if r == cur), default=len(ran))
            left = _left(hist)
            h = _back_from(hist, rel_dir, cur, newer=set(ran[after + 1 :]) | left)
            passed = (
                f"; {', '.join(sorted(left - {cur}))}, left by the rollbacks before this one, "
                "passed over"
                if left - {cur}
                else ""
            )
            if h is not None and cur in ran and h["id"] not in ran:
                # from a release a runner ran to one none ever did (an edit deployed and refused,
                # say): a trap, never a way back; named, it is the user's to choose
                raise ValueError(
                    f"no release a runner ran from before {cur} (a runner ran from it{passed}): "
                    f"{h['id']}, deployed before it, never ran (`invoke rollback --to "
                    f"{h['id']}` goes there all the same)"
                )
            if h is None:
                raise ValueError(
                    "no earlier release on the host to roll back to from this one (the first "
                    "deployed, or those before it pruned: deploy keeps the last `keep_releases` "
                    f"of hosts.yaml{passed}): `invoke rollback --to ID` goes to any release on the host "
                    "(an unknown ID lists them), or restore hosts.yaml's settings and `invoke "
                    "deploy`"
                )
            target, why, how = h["id"], "deployed", {"at": h.get("time")}
    _switch(root, target, how)
    job = _job(rel_dir, target)
    return {
        "current": target,
        "previous": cur,
        "why": why,
        "previous_ran": cur in ran,
        "job": job,
        "previous_job": _job(rel_dir, cur),
        "made_with": _made_with(root, list(job.get("datasets") or {})),
    }


_HELD = []  # the root's lock while this process holds it (a kill -9 frees it)


ABORT = "abort"  # jobspec.DEPLOY_ABORT: deploy's line after the plan where it refuses to go on
LOCK = ".deploy.lock"  # under releases/: held by the deploy or rollback under way


@contextlib.contextmanager
def _one_at_a_time(root):
    """One deploy or rollback at a time on a host: two at once could each prune or drop what the
    other is switching to. An flock on releases/.deploy.lock, taken once per process; a host not
    deployed to yet has nothing to guard until apply makes the folder. A filesystem that has no
    flock (an NFS mount without locking) is not refused for it: nothing is guarded there."""
    import fcntl

    rel_dir = os.path.join(os.path.expanduser(root), "releases")
    if _HELD or not os.path.isdir(rel_dir):
        yield
        return
    try:
        fd = os.open(os.path.join(rel_dir, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        fd = None  # a folder this user may not write: apply would fail on its own, said there
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(
            "another deploy or rollback to this host is under way (from another terminal or "
            "machine); nothing was changed: run this again once it has ended"
        ) from None
    except OSError:  # no locks on this filesystem
        os.close(fd)
        fd = None
    if fd is None:
        yield
        return
    _HELD.append(fd)
    try:
        yield
    finally:
        _HELD.remove(fd)
        os.close(fd)


def session(root, stdin, stdout):
    """plan and apply in one SSH session: a request line, the plan line back, then an optional apply
    line followed by the upload. EOF after the plan means: nothing to do."""
    request = json.loads(stdin.readline() or b"{}")
    stdout.write(json.dumps(plan(root, request)) + "\n")
    stdout.flush()
    line = stdin.readline()
    if not line.strip():
        if not request.get("dry_run"):  # nothing to send: what a cut-off deploy left still goes
            _drop_drafts_left_over(os.path.expanduser(root))
        return {"applied": False}
    if line.strip() == ABORT:  # the laptop refused what it saw: nothing is changed
        return {"applied": False}
    return dict(apply(root, json.loads(line), stdin), applied=True)


def main(argv):
    cmd, root = argv[0], argv[1]
    args = json.loads(argv[2]) if len(argv) > 2 else {}
    try:
        if cmd == "plan":
            out = plan(root, args)
        elif cmd in ("session", "apply", "rollback"):
            with _one_at_a_time(root):
                if cmd == "session":
                    out = session(root, sys.stdin.buffer, sys.stdout)
                elif cmd == "apply":
                    out = apply(root, args, sys.stdin.buffer)
                else:
                    out = rollback(root, args)
        else:
            raise ValueError("unknown command %r" % cmd)
    except (ValueError, OSError, tarfile.TarError) as e:
        sys.stderr.write("error: %s\n" % e)
        return EXIT_BAD_INPUT if isinstance(e, BadRelease) else EXIT_FAILED
    sys.stdout.write(json.dumps(out) + "\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
