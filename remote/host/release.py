"""Host side of deploy and rollback. Standard library only, one file: deploytool sends its source as
`python3 -c SOURCE plan|apply|rollback ROOT ...`, so it works before any release exists on the host.

apply reads a tar stream on stdin holding only the changed files; the rest are hard-linked from the
current release. A release appears under its final name only when complete (rename), and `current`
switches by renaming a new symlink over it: a reader sees the old release or the new, never a mix.
"""

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tarfile
import time

MANIFEST = "MANIFEST.json"
HISTORY = "history.json"
# exit statuses: remote.common.wire.ExitCode's, which this file, sent alone, cannot import
# (tests/unit/remote/common/test_wire.py holds them equal)
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def _write_synced(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _write_json(path, data):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    _write_synced(tmp, json.dumps(data, indent=1).encode())
    os.replace(tmp, path)


def _current_id(root):
    try:
        return os.path.basename(os.readlink(os.path.join(root, "current")))
    except OSError:
        return None


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


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
            out[name] = meta
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


DRAFT_COPIES = "data/draft-models"  # jobspec.DRAFT_COPIES: where deploy puts a draft folder
UPLOAD_END = "end"  # jobspec.UPLOAD_END: the upload's last member (one without it was cut short)
DRAFT_HASHES = os.path.join(DRAFT_COPIES, ".hashes.json")
# a draft's versions, beside its name (a link to one of them): .<name>.v-<digest of its files>
DRAFT_VERSION = ".%s.v-"
_VERSION_CHARS = set("0123456789abcdefghijklmnopqrstuvwxyz-")


def _draft_dir(root, folder):
    """A draft's copy on the host: <remote_dir>/data/draft-models/<name>, nowhere else (a link to the
    version it reads from, or a plain folder an older deploy left)."""
    parts = _safe_member(folder)
    if "/".join(parts[:-1]) != DRAFT_COPIES or parts[-1].startswith("."):
        raise ValueError("a draft goes under %s/, not %r" % (DRAFT_COPIES, folder))
    return os.path.join(root, *parts)


def _is_version(name, entry):
    """`entry` (of data/draft-models) is a version folder's name the tool gives draft `name`."""
    rest = entry[len(DRAFT_VERSION % name) :]
    return entry.startswith(DRAFT_VERSION % name) and bool(rest) and set(rest) <= _VERSION_CHARS


def _draft_current(root, folder):
    """The folder a draft's copy reads from now: the version its name links to, a plain folder an
    older deploy left at the name (or a link of the user's), or None (never sent)."""
    link = _draft_dir(root, folder)
    if os.path.islink(link) and _is_version(os.path.basename(link), os.readlink(link)):
        return os.path.join(os.path.dirname(link), os.readlink(link))
    return link if os.path.isdir(link) else None


def _draft_versions(root, folder):
    """Every version folder of a draft (the tool's: a real folder of its name, never a link)."""
    top, name = os.path.split(_draft_dir(root, folder))
    try:
        entries = sorted(os.listdir(top))
    except OSError:
        return []
    paths = [os.path.join(top, e) for e in entries if _is_version(name, e)]
    return [p for p in paths if os.path.isdir(p) and not os.path.islink(p)]


def _version_of(root, draft):
    """The version folder of the files `draft` names, named by their names, sizes and sha256: a deploy
    cut off and the next one of the same draft build the same folder."""
    content = sorted([rel, f[0], f[2]] for rel, f in draft["files"].items())
    digest = hashlib.sha256(json.dumps(content).encode()).hexdigest()[:16]
    top, name = os.path.split(_draft_dir(root, draft["folder"]))
    return os.path.join(top, DRAFT_VERSION % name + digest)


def _cache_key(root, path):
    return os.path.relpath(path, root).replace(os.sep, "/")


def _draft_hash(root, path, cache):
    """A copy's file as [size, mtime_ns, sha256], the sha256 cached by size and time (sent files keep
    the deploying machine's times, so an unchanged one is not read), and whether it was read now."""
    st = os.stat(path)
    key, ck = "%d:%d" % (st.st_size, st.st_mtime_ns), _cache_key(root, path)
    hit = cache.get(ck)
    fresh = not (
        isinstance(hit, dict) and hit.get("key") == key and isinstance(hit.get("sha256"), str)
    )
    if fresh:
        hit = cache[ck] = {"key": key, "sha256": sha256_file(path)}
    return [st.st_size, st.st_mtime_ns, hit["sha256"]], fresh


def _draft_files(top):
    """The files of a draft's copy (relative path -> path); hidden ones (`.x`, a part) left out."""
    out = {}
    for here, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            path = os.path.join(here, name)
            if not name.startswith(".") and os.path.isfile(path):
                out[os.path.relpath(path, top).replace(os.sep, "/")] = path
    return out


def _clean_stale_parts(top):
    """Parts of a draft's files whose upload died with its process (`.NAME.PID.part`)."""
    for here, _, files in os.walk(top):
        for name in files:
            pid = name.rsplit(".", 2)[-2] if name.endswith(".part") else ""
            if name.startswith(".") and pid.isdigit() and not _pid_alive(int(pid)):
                os.unlink(os.path.join(here, name))


def _draft_plan(root, folders, keep):
    """Per draft copy, the files of the version it reads from, each as [size, mtime_ns, sha256], and
    the whole files of its other versions (a deploy cut off left them: the next sends none again),
    each as a list of those."""
    cache_path = os.path.join(root, DRAFT_HASHES)
    cache = _read_json(cache_path, {}) or {}
    now, waiting, hashed = {}, {}, False
    for folder in folders:
        cur = _draft_current(root, folder)
        others = [v for v in _draft_versions(root, folder) if v != cur]
        now[folder], waiting[folder] = {}, {}
        for top in ([cur] if cur else []) + others:
            for rel, path in sorted(_draft_files(top).items()):
                got, fresh = _draft_hash(root, path, cache)
                hashed = hashed or fresh
                if top == cur:
                    now[folder][rel] = got
                elif got not in waiting[folder].setdefault(rel, []):
                    waiting[folder][rel].append(got)
    if hashed and keep:
        try:
            _write_json(cache_path, cache)
        except OSError:
            pass
    return now, waiting


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
        "drafts": drafts,
        "drafts_pending": drafts_pending,
    }


def _safe_member(name):
    parts = name.split("/")
    if name.startswith("/") or ".." in parts or not name:
        raise ValueError("unsafe path in upload: %r" % name)
    return parts


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
    ran, _ = _last_ran(rel_dir, cur, entries, _ran(root))
    if ran:
        protect.add(ran)  # likewise, where a runner ran
    dirs = _releases(rel_dir)
    # most recently used first (history order), then by mtime for releases older than the history
    order = {h["id"]: i for i, h in enumerate(entries)}
    dirs.sort(
        key=lambda d: (order.get(d, -1), os.stat(os.path.join(rel_dir, d)).st_mtime), reverse=True
    )
    removed = []
    for d in dirs[keep:]:
        if d not in protect:
            shutil.rmtree(os.path.join(rel_dir, d), ignore_errors=True)
            removed.append(d)
    return removed


def _part_of(target):
    return os.path.join(
        os.path.dirname(target), ".%s.%d.part" % (os.path.basename(target), os.getpid())
    )


def _place_draft_file(root, draft, rel, src, cache):
    """One file of a draft, streamed to a part beside its place in the version being built (never the
    one the copy reads from), checked against its sha256, given the sending machine's time, then
    renamed over its place: each file whole or not at all, and one sent before a broken upload is
    kept there (the next deploy sends only the rest)."""
    if rel not in draft.get("send", []):
        raise ValueError("upload names a draft file the deploy does not: %r" % rel)
    size, mtime_ns, digest = draft["files"][rel]
    target = os.path.join(draft["top"], *_safe_member(rel))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    part = _part_of(target)
    h = hashlib.sha256()
    try:
        with open(part, "wb") as f:
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        if h.hexdigest() != digest:
            raise ValueError("draft file %s arrived corrupted (hash mismatch)" % rel)
        os.chmod(part, 0o644)
        os.utime(part, ns=(mtime_ns, mtime_ns))
        os.replace(part, target)
    finally:
        if os.path.exists(part):
            os.unlink(part)
    cache[_cache_key(root, target)] = {"key": "%d:%d" % (size, mtime_ns), "sha256": digest}


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


def apply(root, args, stream):
    """Build releases/<id> from the upload + hard links to the base release; switch current; prune.
    A draft's files go to a version folder of their own, switched to with the release."""
    root = os.path.expanduser(root)
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


def _draft_begin(root, draft):
    """The hash cache, and the apply's draft with `top`, the version folder its files go to (made
    where new; one a deploy cut off left is taken up as it is, the parts of dead uploads cleared)."""
    cache = _read_json(os.path.join(root, DRAFT_HASHES), {}) or {}
    if not draft:
        return None, cache
    draft = dict(draft, top=_version_of(root, draft))
    os.makedirs(draft["top"], exist_ok=True)
    _clean_stale_parts(draft["top"])
    return draft, cache


def _draft_whole(root, path, size, digest, cache):
    try:
        got, _ = _draft_hash(root, path, cache)
    except OSError:
        return False
    return got[0] == size and got[2] == digest


def _draft_complete(root, draft, cache):
    """Every file of the draft whole in its version folder: one not sent hard-linked from a folder of
    the copy that has it (the version it reads from, or one a deploy cut off left), each checked by
    its size and sha256 (cached by size and time: an unchanged file is not read again)."""
    top, cur = draft["top"], _draft_current(root, draft["folder"])
    sources = [s for s in [cur] + _draft_versions(root, draft["folder"]) if s and s != top]
    for rel, (size, _, digest) in sorted(draft["files"].items()):
        dst = os.path.join(top, *_safe_member(rel))
        if _draft_whole(root, dst, size, digest, cache):
            continue
        there = [os.path.join(s, *_safe_member(rel)) for s in sources]
        src = next((p for p in there if _draft_whole(root, p, size, digest, cache)), None)
        if src is None:
            raise ValueError("draft file %s is neither sent nor on the host" % rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        part = _part_of(dst)
        try:
            try:
                os.link(src, part)  # a version is never changed in place: sharing inodes is safe
            except OSError:
                shutil.copy2(src, part)
            os.replace(part, dst)
        finally:
            if os.path.lexists(part):
                os.unlink(part)
        cache[_cache_key(root, dst)] = cache[_cache_key(root, src)]


def _draft_switch(root, draft):
    """The draft's name switched to its new version by renaming a new link over it: a reader sees
    the old version or the new, never a mix. A plain folder an older deploy left at the name is
    first renamed to a version of its own, which goes as old versions go (a link of the user's
    there is renamed beside it, and stays)."""
    link = _draft_dir(root, draft["folder"])
    here, name = os.path.split(link)
    ours = os.path.islink(link) and _is_version(name, os.readlink(link))
    if os.path.lexists(link) and not ours:
        os.rename(link, os.path.join(here, DRAFT_VERSION % name + "old-%d" % time.time_ns()))
    tmp = os.path.join(here, ".%s.link-%d" % (name, os.getpid()))
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.path.basename(draft["top"]), tmp)
    os.replace(tmp, link)


def _draft_drop_old(root, folder, cache):
    """Once the name links to the new version, every other version goes (the old one, one a deploy
    cut off left), and its hashes with it: only what the tool put there (the draft's files, parts,
    a folder they leave empty), so anything else (a hidden file of the user's in a folder an older
    deploy made) stays, and its folder with it. A server running the old draft keeps the files it
    has open."""
    cur = _draft_current(root, folder)
    gone = [folder + "/"]  # the hashes of a plain folder an older deploy made
    for top in _draft_versions(root, folder):
        if top != cur:
            gone.append(_cache_key(root, top) + "/")
            try:
                _remove_version(top)
            except OSError:
                pass  # what is left goes at the next deploy that switches
    for key in [k for k in cache if k.startswith(tuple(gone))]:
        del cache[key]
    try:
        _write_json(os.path.join(root, DRAFT_HASHES), cache)
    except OSError:
        pass


def _drop_drafts_left_over(root, draft=None, cache=None):
    """Versions their draft's name does not link to (but the draft this deploy sent's): one a
    deploy cut off left, not sent again since (the draft went back to what it was) or no longer
    named at all."""
    top = os.path.join(root, DRAFT_COPIES)
    try:
        entries = os.listdir(top)
    except OSError:
        return
    names = {e[1:].split(".v-")[0] for e in entries if e.startswith(".") and ".v-" in e}
    sent = draft["folder"] if draft else None
    for name in sorted(names):
        folder = DRAFT_COPIES + "/" + name
        if not name or name.startswith(".") or folder == sent:
            continue
        cur = _draft_current(root, folder)
        if [v for v in _draft_versions(root, folder) if v != cur]:
            if cache is None:
                cache = _read_json(os.path.join(root, DRAFT_HASHES), {}) or {}
            _draft_drop_old(root, folder, cache)


def _remove_version(top):
    """A version folder's draft files (not hidden), dead uploads' parts, and the folders that leaves
    empty, `top` too."""
    made = {top}
    for path in _draft_files(top).values():
        os.unlink(path)
        here = os.path.dirname(path)
        while here != top and here not in made:
            made.add(here)
            here = os.path.dirname(here)
    _clean_stale_parts(top)
    for here in sorted(made, key=len, reverse=True):
        try:
            os.rmdir(here)
        except OSError:
            pass


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


def _last_ran(rel_dir, cur, hist, ran):
    """The last release a runner ran from, other than `cur` and still on the host, and where it
    stands in `ran`. After a rollback along `ran` (no runner since), from where that one stopped, so
    a second rollback goes further back."""
    last = hist[-1] if hist else {}
    end = len(ran)
    if last.get("id") == cur and last.get("ran_len") == len(ran):
        end = last.get("ran_at", end)
    for i in range(end - 1, -1, -1):
        if ran[i] != cur and os.path.isdir(os.path.join(rel_dir, ran[i])):
            return ran[i], i
    return None, None


def _job(rel_dir, rid):
    return _read_json(os.path.join(rel_dir, rid or "", "job.json"), {}) if rid else {}


def rollback(root, args):
    """To the last release a runner ran from (one deployed and refused never ran: going there
    would only repeat it), or, where none did, to the one deployed before; `to` names one."""
    root = os.path.expanduser(root)
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
            h = _back_from(hist, rel_dir, cur, newer=set(ran[after + 1 :]))
            if h is None:
                raise ValueError("no earlier release on the host to roll back to")
            target, why, how = h["id"], "deployed", {"at": h.get("time")}
    _switch(root, target, how)
    return {
        "current": target,
        "previous": cur,
        "why": why,
        "previous_ran": cur in ran,
        "job": _job(rel_dir, target),
        "previous_job": _job(rel_dir, cur),
    }


_HELD = []  # the root's lock while this process holds it (a kill -9 frees it)


@contextlib.contextmanager
def _one_at_a_time(root):
    """One deploy or rollback at a time on a host: two at once could each prune or drop what the
    other is switching to. An flock on the remote_dir itself (nothing written for it), taken once
    per process; a host not deployed to yet has nothing to guard until apply makes the folder."""
    import fcntl

    root = os.path.expanduser(root)
    if _HELD or not os.path.isdir(root):
        yield
        return
    fd = os.open(root, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(
            "another deploy or rollback to this host is under way (from another terminal or "
            "machine); nothing was changed: run this again once it has ended"
        ) from None
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
