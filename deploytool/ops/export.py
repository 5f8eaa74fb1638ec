"""export: the pulled records -> one training file for a trainer, plus `FILE.manifest.json`.

Reads `<pulled>/<host>/<DS>.jsonl` and the settings each dataset's records were made with
(`<DS>.meta.json`). Records made under different settings are not put in one file unless asked
(`mixed`); the manifest says, per dataset, what was kept and dropped and why, and with what.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from remote.common.caps import CLEAR, Caps, Target, selection
from remote.common.codec import atomic_file
from remote.common.records import Record
from remote.common.words import suggest

from ..config import Config
from ..errors import UsageError
from .formats import FORMATS, PER_REPLY, ROWS, NoTokenIds, Piece, pieces, specforge_cut
from .pull import BEYOND_FILE, CAPS_FILE

# why a row is left out: what each means, said in the manifest and by --help
DROP_REASONS = {
    "empty": "a reply with no answer text (cut inside its thinking, or empty): re-rendered, it "
    "gains a closing </think> and an end of turn the model never wrote",
    "length": "a reply cut at max_tokens: a re-rendered row closes it with an end-of-turn token the "
    "model never wrote",
    "original_answers": "the row holds the dataset's own answers, and the trainer puts loss on every "
    "assistant turn of a row",
    "role_order": "a message order SpecForge's parser cuts (e.g. a system message right before the "
    "answer), losing the reply",
    "beyond_cap": "a record of a prompt past its dataset's cap (made before the cap was lowered or "
    "in flight then, or of a prompt its file no longer has among its first N): the job's records "
    "are those of each dataset's first N prompts, in the file as it is now",
}
# what makes records differ as training data (turns: last and all mix well in one file)
SETTINGS = ("model", "sampling", "chat_template_kwargs", "extra_body")


@dataclass
class Source:
    host: str
    dataset: str
    path: Path
    meta: dict
    cap: int | None = None  # the job's: its records are those of the first N prompts (None: all)
    caps_pulled: bool = True  # False: pulled before pull brought the caps (every record is taken)
    beyond: frozenset[str] | None = None  # the host's count of the records beyond the cap
    # the settings of the records written, once written and where each change of settings is
    # placed in the file (the meta file names its first record): json -> settings
    written: dict[str, dict] | None = None

    @property
    def target(self) -> Target:
        return Target(self.cap, beyond=self.beyond)

    def eras(self) -> list[tuple[int | None, dict]] | None:
        """The settings its records were made with, oldest first, each with the byte offset in the
        file where its first record begins (None: from the file's start); None where a change
        cannot be placed (a meta file written before that offset was kept in it)."""
        entries = [*reversed(self.meta.get("previous") or []), self.meta]
        if not all(isinstance(e.get("since"), int) for e in entries[1:]):
            return None
        return [(e.get("since"), _settings(e)) for e in entries]

    def made_with(self) -> list[dict]:
        """Each set of settings its rows were made with, the newest first: of the rows written
        where known (in the order the file has them), else every one its meta file names."""
        if self.written is not None:
            return list(reversed(self.written.values()))
        return [_settings(e) for e in (self.meta, *(self.meta.get("previous") or []))]


@dataclass
class DatasetTally:
    records: int = 0
    kept: int = 0
    rows: int = 0
    tokens: int = 0  # the target's tokens the rows written train (their trained replies')
    dropped: dict = field(default_factory=dict)  # reason -> rows left out (a record's, all of them)
    dropped_tokens: dict = field(default_factory=dict)  # reason -> the tokens those rows held
    releases: set = field(default_factory=set)
    first: int | None = None
    last: int | None = None

    def left_out(self, why: str, made: list) -> None:
        """`made`: the rows' pieces left out (a record's, all of them)."""
        self.dropped[why] = self.dropped.get(why, 0) + len(made)
        self.dropped_tokens[why] = self.dropped_tokens.get(why, 0) + sum(map(trained_tokens, made))

    def wrote(self, rec: Record) -> None:
        """A record with rows in the file: the releases and times the manifest says are those of
        what was written, not of records left out (beyond a cap, say)."""
        self.kept += 1
        self.releases.add(rec.release or "unknown")
        if t := rec.created:
            self.first = min(self.first or t, t)
            self.last = max(self.last or t, t)


@dataclass
class ExportResult:
    out: Path
    manifest: Path
    rows: int
    kept: int
    dropped: int
    datasets: dict
    reads_as: str = ""
    records: int = 0  # every record read
    tokens: int = 0  # the reply tokens the rows written train
    per_turn: bool = False
    per_turn_why: str | None = None  # why the export chose per-turn rows itself
    keeps: dict = field(default_factory=dict)  # reason -> the flag that keeps what it left out


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UsageError(
            f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}{suggest(fmt, FORMATS)}"
        )


def find_sources(pulled: Path, hosts: dict[str, list[str]]) -> list[Source]:
    """hosts: host -> the dataset names to export from it, each in its job's order. The sources
    come dataset by dataset in that order (one only a later host's job has goes after the name
    before it there), each dataset's hosts in their order: the rows, the manifest and the screen
    follow the job, not the hosts (and the first host's record of a prompt is still the one kept)."""
    merged: list[str] = []
    for names in hosts.values():
        at = 0
        for ds in names:
            if ds in merged:
                at = merged.index(ds) + 1
            else:
                merged.insert(at, ds)
                at += 1
    order = {ds: i for i, ds in enumerate(merged)}
    found = []
    for host, names in hosts.items():
        caps = Caps.read(pulled / host / CAPS_FILE)
        counted = pulled / host / BEYOND_FILE
        beyond = json.loads(counted.read_text()) if caps and counted.exists() else {}
        for ds in names:
            path = pulled / host / f"{ds}.jsonl"
            if path.exists():
                meta_path = path.with_name(f"{ds}.meta.json")
                meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
                cap = caps.target(ds) if caps else None
                ids = frozenset(beyond[ds]) if ds in beyond else None
                found.append(Source(host, ds, path, meta, cap, caps is not None, ids))
    return sorted(found, key=lambda s: order[s.dataset])  # stable: hosts in order within one


def _settings(meta: dict) -> dict:
    return {k: meta.get(k) for k in SETTINGS}


def check_settings(sources: list[Source], mixed: bool) -> None:
    """One file, one set of settings — or `mixed`, said out loud. By the rows written where they
    are known (records beyond a cap, made with other settings, leave nothing to mix)."""
    if mixed:
        return
    within = [f"{s.host}:{s.dataset}" for s in sources if len(s.made_with()) > 1]
    if within:
        raise UsageError(
            f"{', '.join(within)}: records made under different settings in one dataset (resumed "
            "with --force); pass --mixed to export them anyway (the manifest lists every setting)"
        )
    sources = [s for s in sources if s.made_with()]  # one with no row written mixes nothing
    first = sources[0] if sources else None
    for s in sources[1:]:
        a, b = first.made_with()[0], s.made_with()[0]
        diff = [k for k in SETTINGS if a[k] != b[k]]
        if diff:
            what = "; ".join(f"{k}: {json.dumps(a[k])} vs {json.dumps(b[k])}" for k in diff)
            raise UsageError(
                f"{first.host}:{first.dataset} and {s.host}:{s.dataset} were made with different "
                f"settings ({what}): export them separately (--datasets), or pass --mixed to put "
                "them in one file (the manifest lists each dataset's settings)"
            )


READS_AS = {
    "specforge": "SpecForge: data.train_data_path in the run config (specforge train -c RUN.yaml)",
    "speculators": "speculators prepare-data --data FILE (its output: speculators train "
    "--data-path); SpecForge: data.prompts_path (pre-tokenized)",
    "sharegpt": "a trainer of ShareGPT conversations that trains every gpt turn",
}


# what keeps the rows a reason leaves out (said beside every count of them)
KEEP_FLAG = {
    "empty": "--keep empty",
    "length": "--keep length",
    "original_answers": "--per-turn keeps their replies alone",
    "role_order": "--keep role_order",
    "beyond_cap": "--keep beyond_cap",
}
# formats whose trainer can train a row's last reply alone (SpecForge: data.train_only_last_turn)
LAST_TURN_READERS = ("specforge",)


def _holds_originals(raw: bytes) -> bool:
    if raw.count(b'"assistant"') < 2:  # one reply and no history: the common case, not parsed
        return False
    return pieces(Record.from_json(json.loads(raw)), False)[0].originals() > 0


def choose_rows(sources: list[Source], fmt: str, per_turn: bool | None) -> tuple[bool, str | None]:
    """Whole-conversation rows or per-turn rows (per_turn None: the export chooses). Whole rows
    train every assistant turn they hold, so a conversation that carries the dataset's own earlier
    answers cannot be one; per-turn rows, read as training only their last turn, train each
    generated reply once. One file is read one way: one such record makes the whole file per-turn.
    Returns (per_turn, why it was chosen)."""
    if per_turn is not None or fmt not in LAST_TURN_READERS:
        return bool(per_turn), None
    for s in sources:
        with open(s.path, "rb") as f:
            for raw in f:
                if raw.endswith(b"\n") and _holds_originals(raw):
                    return True, (
                        f"{s.dataset}'s conversations hold the dataset's own earlier answers, "
                        "which whole rows would train"
                    )
    return False, None


def default_drop(fmt: str, per_turn: bool) -> set[str]:
    """What the trainer would reject or mistrain, per format: only generated tokens carry loss."""
    drop = {"empty"}
    if fmt not in PER_REPLY:  # rows the trainer re-renders from text
        drop.add("length")
        if not per_turn:
            drop.add("original_answers")
    if fmt == "specforge":
        drop.add("role_order")
    return drop


def parse_reasons(flag: str, value: str | None) -> set[str]:
    """The reasons a flag names; None: the flag left out. Typed empty, it names none: bad input,
    never read as left out."""
    if value is None:
        return set()
    parts = [r.strip() for r in value.split(",")]
    reasons = set(parts)
    if not all(parts):
        raise UsageError(
            f"{flag}: expected reasons, comma-separated ({', '.join(DROP_REASONS)}), got {value!r}"
        )
    bad = sorted(reasons - set(DROP_REASONS))
    if bad:
        raise UsageError(
            f"{flag}: unknown reason {', '.join(bad)}{suggest(bad[0], DROP_REASONS)}; known: "
            f"{', '.join(DROP_REASONS)}"
        )
    return reasons


def effective_drop(
    fmt: str, per_turn: bool, drop: str | None = None, keep: str | None = None
) -> tuple[str, ...]:
    """The format's defaults, plus --drop, less --keep (a reason in both is a contradiction)."""
    more, less = parse_reasons("--drop", drop), parse_reasons("--keep", keep)
    both = sorted(more & less)
    if both:
        raise UsageError(f"--drop and --keep both name {', '.join(both)}")
    # the job's records are its caps': any format leaves out those beyond them
    base = default_drop(fmt, per_turn) | {"beyond_cap"}
    return tuple(r for r in DROP_REASONS if r in (base | more) - less)


def trained_tokens(piece: Piece) -> int:
    """The reply tokens a row puts loss on: what it teaches the draft, as vLLM counted them."""
    return sum(int(g.usage.get("completion_tokens") or 0) for _, g in piece.trained())


def drop_reason(piece: Piece, drop: tuple[str, ...]) -> str | None:
    trained = piece.trained()
    if "empty" in drop and any(
        not (piece.convo[i].get("content") or "").strip() for i, _ in trained
    ):
        return "empty"
    if "length" in drop and any(g.finish_reason == "length" for _, g in trained):
        return "length"
    if "original_answers" in drop and piece.originals():
        return "original_answers"
    if "role_order" in drop and specforge_cut(piece.convo):
        return "role_order"
    return None


def export(
    sources: list[Source],
    out: Path,
    *,
    fmt: str,
    drop: tuple[str, ...] | None = None,
    per_turn: bool | None = None,
    mixed: bool = False,
    advance: Callable[[int], None] = lambda n: None,
    drop_flags: tuple[str | None, str | None] = (None, None),
) -> ExportResult:
    """per_turn None: whole rows where they train only generated replies, else per-turn rows
    (choose_rows); drop None: the format's own reasons for the rows chosen, with --drop and --keep
    (`drop_flags`) over them."""
    check_format(fmt)
    if not sources:
        raise UsageError(
            "no pulled records to export (nothing under the pulled folder for these hosts and "
            "datasets)"
        )
    if per_turn is None and "original_answers" in parse_reasons("--keep", drop_flags[1]):
        per_turn = False  # the dataset's own answers trained: only whole rows hold them
    per_turn, why = choose_rows(sources, fmt, per_turn)
    if drop is None:  # the format's own: what its trainer would reject or mistrain
        drop = effective_drop(fmt, per_turn, *drop_flags)
    tallies: dict[str, DatasetTally] = {}
    seen: set[tuple[str, str]] = set()
    with atomic_file(out, text=True) as f:
        for s in sources:
            tally = tallies.setdefault(s.dataset, DatasetTally())
            _one(s, f, tally, seen, fmt, drop, per_turn, advance)
        check_settings(sources, mixed)  # by the rows written: refused, no file is left
    manifest = out.with_name(out.name + ".manifest.json")
    body = _manifest(sources, tallies, fmt, drop, per_turn, mixed, out)
    body["per_turn_why"] = why
    manifest.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n")
    return ExportResult(
        out,
        manifest,
        **body["totals"],
        datasets=body["datasets"],
        reads_as=body["reads_as"],
        per_turn=per_turn,
        per_turn_why=why,
        keeps={r: KEEP_FLAG[r] for r in drop if r in KEEP_FLAG},
    )


def _rows(rec: Record, made: list, fmt: str, drop, per_reply: bool, tally) -> list[dict]:
    rows = []
    for k, piece in enumerate(made):
        why = drop_reason(piece, drop)
        if why:
            tally.left_out(why, [piece])
        else:
            rows.append(ROWS[fmt](rec, piece, k if per_reply else None))
            tally.tokens += trained_tokens(piece)
    return rows


def _one(s: Source, f, tally, seen, fmt, drop, per_turn, advance) -> None:
    per_reply = per_turn or fmt in PER_REPLY
    eras, era, at = s.eras(), 0, 0  # at: where the line read begins in the file
    written: dict[str, dict] = {}
    with open(s.path, "rb") as src:
        for raw in src:
            advance(len(raw))
            if not raw.endswith(b"\n"):
                break  # a torn tail (a pull killed mid-line): the next pull completes it
            rec = Record.from_json(json.loads(raw))
            tally.records += 1
            while eras and era + 1 < len(eras) and at >= eras[era + 1][0]:
                era += 1  # from here on, records made with the next settings
            at += len(raw)
            # a record left out whole counts the rows it would have made, as the other reasons do
            made = pieces(rec, per_reply)
            if "beyond_cap" in drop and not s.target.holds(rec.id, rec.index):
                tally.left_out("beyond_cap", made)
                continue
            if (s.dataset, rec.id) in seen:  # the same prompt recorded on two hosts: the first kept
                tally.left_out("duplicate", made)
                continue
            seen.add((s.dataset, rec.id))
            try:
                rows = _rows(rec, made, fmt, drop, per_reply, tally)
            except NoTokenIds:
                raise UsageError(
                    f"{s.host}:{s.dataset}: record {rec.id} has no token ids: the speculators "
                    "format trains on the exact tokens (input_ids, loss_mask), so the records must "
                    "be made with job.extra_body.return_token_ids: true; export these as "
                    "specforge or sharegpt instead"
                ) from None
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
            if rows:
                tally.wrote(rec)
                if eras:
                    written.setdefault(json.dumps(eras[era][1], sort_keys=True), eras[era][1])
            tally.rows += len(rows)
    if eras:
        s.written = written


def _when(t) -> str | None:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t is not None else None


def _manifest(sources, tallies, fmt, drop, per_turn, mixed, out) -> dict:
    datasets, caps = {}, {}
    for s in sources:
        t = tallies[s.dataset]
        cap = s.cap if s.caps_pulled else "not pulled (every record taken)"
        caps.setdefault(s.dataset, {})[s.host] = cap
        made = s.made_with() or [_settings(s.meta)]  # no row written: its records' latest
        entry = datasets.setdefault(
            s.dataset,
            {
                "hosts": [],
                "cap": cap,
                "records": t.records,
                "kept": t.kept,
                "dropped": dict(sorted(t.dropped.items())),
                "rows": t.rows,
                "tokens": t.tokens,  # the reply tokens the rows written train
                "dropped_tokens": dict(sorted(t.dropped_tokens.items())),  # those left out held
                **made[0],  # the settings of the rows written (their latest, where mixed)
                "turns": s.meta.get("turns", "last"),
                "previous_settings": made[1:],
                "releases": sorted(t.releases),
                "first_record": _when(t.first),
                "last_record": _when(t.last),
            },
        )
        entry["hosts"].append(s.host)
    for ds, by_host in caps.items():  # hosts with caps of their own: each said, {host: cap}
        if len({json.dumps(c) for c in by_host.values()}) > 1:
            datasets[ds]["cap"] = by_host
    return {
        "file": out.name,
        "format": fmt,
        "per_turn": per_turn,
        "reads_as": READS_AS[fmt]
        + (", data.train_only_last_turn: true" if per_turn and fmt == "specforge" else ""),
        "drop": {why: DROP_REASONS[why] for why in drop},
        "mixed_settings": mixed,
        "written": _when(time.time()),
        "totals": {
            "records": sum(d["records"] for d in datasets.values()),
            "kept": sum(d["kept"] for d in datasets.values()),
            "dropped": sum(sum(d["dropped"].values()) for d in datasets.values()),
            "rows": sum(d["rows"] for d in datasets.values()),
            "tokens": sum(d["tokens"] for d in datasets.values()),
        },
        "datasets": datasets,
    }


def default_name(config: Config, host_spec: str | None, fmt: str) -> str:
    """The training file's name beside hosts.yaml: `export-<format>.jsonl` of the default hosts,
    the hosts in it otherwise (`export-specforge-gpu2.jsonl`), so one host's export never
    overwrites the file of others."""
    hosts = [h.name for h in config.select_hosts(host_spec)]
    if hosts == [h.name for h in config.select_hosts(None)]:
        return f"export-{fmt}.jsonl"
    return f"export-{fmt}-{'-'.join(hosts)}.jsonl"


def wanted_datasets(config: Config, hosts, datasets: str | None) -> dict[str, list[str]]:
    """--datasets per host (None or `all`: every dataset of its job), read as restart reads it;
    UsageError for one a host lacks."""
    try:
        chosen = CLEAR if datasets is None else selection(datasets)
    except ValueError as e:
        raise UsageError(f"--datasets: {e}") from None
    wanted = {}
    for h in hosts:
        names = config.job_for(h.name).dataset_names()
        asked = names if chosen == CLEAR else list(chosen)
        unknown = [d for d in asked if d not in names]
        if unknown:
            raise UsageError(
                f"--datasets: {h.name} has no dataset {', '.join(unknown)}; it has {', '.join(names)}"
            )
        wanted[h.name] = [d for d in names if d in asked]  # the job's order, not as typed
    return wanted
