"""Host side of deploy's draft copies, and the file helpers the release code shares. Standard
library only: deploytool sends this file's source ahead of release.py's (`python3 -c SOURCE`), so
both work before any release exists on the host.

A draft folder of the user's machine is copied to <remote_dir>/data/draft-models/<name>: a link to
a version folder named by its files' digest. A deploy builds the new version beside the old one
(resumable: what a cut-off deploy left is taken up), checks every file's sha256, then switches the
link whole; old versions go once it has. A reader sees the old version or the new, never a mix.
"""

import hashlib
import json
import os
import shutil
import time


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


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


DRAFT_COPIES = "data/draft-models"  # jobspec.DRAFT_COPIES: where deploy puts a draft folder
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


def _safe_member(name):
    parts = name.split("/")
    if name.startswith("/") or ".." in parts or not name:
        raise ValueError("unsafe path in upload: %r" % name)
    return parts


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
    named at all. Only beside a name the tool links to a version of its own: a folder of the
    user's that only looks like a version is never touched."""
    top = os.path.join(root, DRAFT_COPIES)
    try:
        entries = os.listdir(top)
    except OSError:
        return
    names = {e[1:].split(".v-")[0] for e in entries if e.startswith(".") and ".v-" in e}
    sent = draft["folder"] if draft else None
    for name in sorted(names):
        folder = DRAFT_COPIES + "/" + name
        link = os.path.join(top, name)
        ours = os.path.islink(link) and _is_version(name, os.readlink(link))
        if not name or name.startswith(".") or folder == sent or not ours:
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
