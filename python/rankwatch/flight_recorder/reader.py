"""Reading Flight Recorder dumps: finding them by content, loading them without running
anything, and checking every value that the analysis uses.

A dump is untrusted input. Pickles are read by an unpickler that refuses every global, so
only plain containers and scalars are ever built (no class is looked up, no callable runs);
the file's size is capped before anything is read, and the result is checked field by field.
A dump that cannot be used raises `DumpError` with the reason; an entry that fails a check is
left out and counted.

Formats: every version torch has written, pickle and JSON. 1.x names the collective
sequence id `seq_id` and keys `pg_config` by the numeric pg id; 2.0 on adds
`process_group` (name, description), `collective_seq_id`/`p2p_seq_id` and the group
description table; later minors add dtypes, `timeout_ms`, `is_p2p`, `pg_status` and thread
fields, all optional here. JSON dumps (`_dump_nccl_trace_json`) hold the same keys, with
`pg_status` counters as strings and missing times as 0."""

from __future__ import annotations

import functools
import gc
import io
import os
import pickle
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from rankwatch import _core
from rankwatch.flight_recorder.model import (
    Dump,
    Entries,
    Entry,
    Frame,
    GroupConfig,
    GroupStatus,
)

MAX_DUMP_BYTES = 256 << 20  # torch's default buffer of 2,000 entries with stacks: a few MB
MAX_ENTRIES = 1_000_000
MAX_FRAMES = 256
MAX_TENSORS = 4096
MAX_DIMS = 64
MAX_RANK = (1 << 31) - 1
MAX_TEXT = 4096  # longest string kept from a dump (a frame's file name, a pg description)
INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1  # torch writes int64; nothing wider is kept
SNIFF_BYTES = 64 << 10
_PROBLEMS_KEPT = 3

_STATES = frozenset({"scheduled", "started", "completed"})
_RANK_IN_NAME = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle|bin))?$", re.IGNORECASE)
_RANKS_TEXT = re.compile(r"^\[\s*(?:\d+\s*(?:,\s*\d+\s*)*)?\]$")
_PICKLE_KEYS = (b"entries", b"pg_config", b"profiling_name", b"version")
_JSON_KEYS = (b'"profiling_name"', b'"pg_config"', b'"version"')


class DumpError(Exception):
    """A dump that cannot be used; the message says why (without the path)."""


class _NoGlobals(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings, bytes, numbers, booleans and None; refuses
    every class, function or extension code a pickle names (and with them REDUCE, NEWOBJ,
    INST, OBJ and BUILD, which need one). Persistent ids are refused by the base class."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"refers to {module[:80]}.{name[:80]}: a dump holds plain data only, nothing is run"
        )


@contextmanager
def no_gc() -> Iterator[None]:
    """Loading builds millions of containers and frees none: the cyclic collector would scan
    them over and over for nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def sniff(head: bytes) -> str | None:
    """'pickle' or 'json' when the first bytes of a file look like a Flight Recorder dump."""
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        # torch writes the small tables first and `entries` after them (before 2.0, first);
        # a pickle that names one of the keys but is no dump is reported, not passed over
        return "pickle" if any(k in head for k in _PICKLE_KEYS) else None
    stripped = head.lstrip()
    if stripped.startswith(b"{") and b'"entries"' in head and any(k in head for k in _JSON_KEYS):
        return "json"
    return None


def rank_from_name(path: Path) -> int | None:
    """torch names a dump `<prefix><rank>` (`nccl_trace_rank_3`); the number at the end."""
    m = _RANK_IN_NAME.search(path.name)
    if m is None:
        return None
    value = int(m.group(1)) if len(m.group(1)) <= 10 else MAX_RANK + 1
    return value if value <= MAX_RANK else None


def load_dump(
    path: Path,
    max_bytes: int = MAX_DUMP_BYTES,
    rank: int | None = None,
    keep_last: int | None = None,
) -> Dump:
    """Reads and checks one dump. Raises DumpError (the reason) when it cannot be used."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise DumpError(e.strerror or str(e)) from None
    if not stat.S_ISREG(st.st_mode):
        raise DumpError("not a regular file")
    if st.st_size > max_bytes:
        raise DumpError(
            f"{st.st_size:,} bytes, over the {max_bytes:,}-byte limit for a Flight Recorder dump"
        )
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise DumpError(e.strerror or str(e)) from None
    if len(data) > max_bytes:
        raise DumpError(f"grew past the {max_bytes:,}-byte limit while being read")
    kind = sniff(data[:SNIFF_BYTES])
    if kind is None:
        raise DumpError("not a Flight Recorder dump (neither its pickle nor its JSON form)")
    with no_gc():
        work_limit = len(data) + 100_000
        if kind == "pickle":
            fast = _fast_pickle(data, path, rank, work_limit, keep_last)
            if fast is not None:
                return fast
        doc = _decode(data, kind)
        if rank is None:
            rank = _rank_of(doc, path)
        return check_dump(doc, str(path), rank, work_limit=work_limit, keep_last=keep_last)


def _fast_pickle(
    data: bytes, path: Path, rank: int | None, work_limit: int, keep_last: int | None
) -> Dump | None:
    """The Rust reader (`rankwatch-core`'s `flight_recorder`): the same restricted decoding
    and entry checks, for a dump that passes them all; None for anything else (refused,
    malformed, an entry left out, over the work limit), which the Python reader below then
    decides and explains."""
    got = _core.fr_read_pickle(data, keep_last, work_limit)
    if got is None:
        return None
    return taken_dump(got, path, rank)


def taken_dump(got: tuple[dict[str, Any], Any, int], path: Path, rank: int | None = None) -> Dump:
    """A dump from what the Rust reader took whole (`fr_read_pickle`, `fr_read_files`):
    its top-level values checked here, its entries kept where they are. Raises DumpError."""
    top, table, start = got
    if rank is None:
        rank = _rank_of(top, path)
    dump = _checked_top(top, str(path), rank)
    dump.entries = Entries(table)
    dump.dropped_entries = start
    return dump


def _decode(data: bytes, kind: str) -> Any:
    with no_gc():
        if kind == "json":
            try:
                return orjson.loads(data)
            except orjson.JSONDecodeError as e:
                raise DumpError(f"damaged JSON: {e}") from None
        try:
            return _NoGlobals(io.BufferedReader(io.BytesIO(data), 1 << 16)).load()
        except pickle.UnpicklingError as e:
            raise DumpError(f"refused pickle: {e}") from None
        except EOFError:
            raise DumpError("truncated pickle (it ends before its STOP)") from None
        except RecursionError:
            raise DumpError("pickle nested too deeply") from None
        except MemoryError:
            raise DumpError("pickle needs more memory than its size allows") from None
        except Exception as e:  # any other malformed opcode stream
            raise DumpError(f"malformed pickle: {type(e).__name__}: {str(e)[:200]}") from None


def _rank_of(doc: Any, path: Path) -> int:
    if isinstance(doc, dict):
        value = doc.get("rank")
        if type(value) is int and 0 <= value <= MAX_RANK:
            return value
    rank = rank_from_name(path)
    if rank is None:
        raise DumpError("its name does not end in the rank (torch writes <prefix><rank>)")
    return rank


def _text(value: Any) -> str | None:
    if type(value) is str:
        return value[:MAX_TEXT]
    return None


def _count(value: Any) -> int | None:
    """An int (not a bool), or its decimal text (JSON dumps write counters as strings)."""
    if type(value) is int:
        return value
    if type(value) is str and len(value) <= 20:
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _ranks(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, str):
        # every dump of a job states the same lists: each text is parsed once (texts up to
        # 1 MB, 16 of them, are remembered)
        return _ranks_text(value) if len(value) <= 1 << 20 else _ranks_text.__wrapped__(value)
    if isinstance(value, list | tuple) and all(type(r) is int and r >= 0 for r in value):
        ranks = tuple(value)
    else:
        return None
    return ranks if all(r <= MAX_RANK for r in ranks) else None


@functools.lru_cache(maxsize=16)
def _ranks_text(value: str) -> tuple[int, ...] | None:
    """A rank list as torch writes it in pg_config (`"[0, 1, 2]"`)."""
    if len(value) > 16 * MAX_TENSORS * 64 or not _RANKS_TEXT.match(value):
        return None
    inner = value.strip("[] \t")  # the pattern allows no empty item between commas
    ranks = tuple(map(int, inner.split(","))) if inner.strip() else ()
    return ranks if all(r <= MAX_RANK for r in ranks) else None


def _groups(value: Any) -> dict[str, GroupConfig]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DumpError(f"pg_config is {type(value).__name__}, expected a table of groups")
    out: dict[str, GroupConfig] = {}
    for key, spec in value.items():
        if type(key) is int:  # format 1.x: pg id -> list of ranks
            ranks = _ranks(spec)
            if ranks is None:
                raise DumpError(f"pg_config[{key}] is not a list of ranks")
            out[str(key)] = GroupConfig(str(key), "", ranks)
            continue
        name = _text(key)
        if name is None or not isinstance(spec, dict):
            raise DumpError("pg_config holds an entry that is not name: {name, desc, ranks}")
        desc = _text(spec.get("desc", "")) or ""
        out[name] = GroupConfig(
            _text(spec.get("name", name)) or name, desc, _ranks(spec.get("ranks"))
        )
    return out


def _status(value: Any) -> dict[str, GroupStatus]:
    if not isinstance(value, dict):
        return {}
    out: dict[str, GroupStatus] = {}
    for key, spec in value.items():
        if not isinstance(spec, dict) or (_text(key) is None and type(key) is not int):
            continue
        out[str(key)] = GroupStatus(
            _count(spec.get("last_enqueued_collective")),
            _count(spec.get("last_started_collective")),
            _count(spec.get("last_completed_collective")),
        )
    return out


def check_dump(
    doc: Any,
    path: str,
    rank: int,
    work_limit: int | None = None,
    keep_last: int | None = None,
) -> Dump:
    """Turns a decoded dump into checked values (see the module doc for the versions).

    `work_limit` bounds the shapes, dimensions and frames walked: a pickle can refer to one
    list a million times for two bytes a reference, so the walk is held to what the file's
    size can honestly hold (every element a dump really has costs at least a byte).
    `keep_last` keeps only the newest entries (the memory budget's share of this dump);
    the older ones are counted in `Dump.dropped_entries`."""
    if not isinstance(doc, dict):
        raise DumpError(f"holds a {type(doc).__name__}, not the table torch writes")
    version = doc.get("version", "unknown")
    if type(version) is not str or len(version) > 32:
        raise DumpError(f"version is {type(version).__name__}, expected text like '2.10'")
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise DumpError(
            "no entries list" if entries is None else f"entries is {type(entries).__name__}"
        )
    if len(entries) > MAX_ENTRIES:
        raise DumpError(f"{len(entries):,} entries, more than the {MAX_ENTRIES:,} accepted")
    dump = _checked_top(doc, path, rank)
    checked: list[Entry] = []
    problems = dump.entry_problems
    work = 0
    cache = _Cache()
    start = 0
    if keep_last is not None and len(entries) > keep_last:
        start = len(entries) - keep_last
        dump.dropped_entries = start
    for i in range(start, len(entries)):
        raw = entries[i]
        try:
            entry = _entry(i, raw, cache)
            checked.append(entry)
            if work_limit is not None:
                work += 1 + len(entry.frames)
                for shapes in (entry.input_sizes, entry.output_sizes):
                    work += len(shapes) + sum(len(s) for s in shapes)
                if work > work_limit:
                    raise DumpError(
                        "refers to the same data over and over (more than its size can hold)"
                    )
        except _BadEntry as e:
            dump.skipped_entries += 1
            if len(problems) < _PROBLEMS_KEPT:
                problems.append(f"entry {i}: {e}")
    if entries and not checked:
        raise DumpError(f"no usable entry ({problems[0] if problems else 'all malformed'})")
    dump.entries = Entries.of(checked)
    return dump


def _checked_top(doc: dict[str, Any], path: str, rank: int) -> Dump:
    """A dump with its top-level values checked (version, groups, status), no entries yet."""
    version = doc.get("version", "unknown")
    if type(version) is not str or len(version) > 32:
        raise DumpError(f"version is {type(version).__name__}, expected text like '2.10'")
    return Dump(
        path=path,
        rank=rank,
        version=version,
        entries=_NO_ENTRIES,
        groups=_groups(doc.get("pg_config")),
        status=_status(doc.get("pg_status")),
    )


_NO_ENTRIES = Entries.of(())


class _BadEntry(Exception):
    pass


def _int_field(raw: dict[str, Any], key: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if type(value) is not int:
        raise _BadEntry(f"{key} is {type(value).__name__}, expected an integer")
    if not INT_MIN <= value <= INT_MAX:
        raise _BadEntry(f"{key} does not fit 64 bits")
    return value


def _sizes(raw: dict[str, Any], key: str, cache: _Cache) -> tuple[tuple[int, ...], ...]:
    value = raw.get(key)
    if value is None:
        return ()
    if type(value) is not list or len(value) > MAX_TENSORS:
        raise _BadEntry(f"{key} is not a list of shapes")
    try:  # equal shapes are one object in memory (most entries repeat a few shapes)
        key_t = tuple(map(tuple, value))
        got = cache.sizes.get(key_t)
    except TypeError:  # not lists, or something unhashable inside
        raise _BadEntry(f"{key} holds a shape that is not a list of integers") from None
    if got is None:
        for shape in value:
            if (
                type(shape) is not list
                or len(shape) > MAX_DIMS
                or not all(type(d) is int and INT_MIN <= d <= INT_MAX for d in shape)
            ):
                raise _BadEntry(f"{key} holds a shape that is not a list of integers")
        got = cache.sizes[key_t] = key_t
    return got


def _dtypes(raw: dict[str, Any], key: str, cache: _Cache) -> tuple[str, ...]:
    value = raw.get(key)
    if value is None:
        return ()
    if type(value) is not list or len(value) > MAX_TENSORS:
        raise _BadEntry(f"{key} is not a list of dtype names")
    try:
        key_t = tuple(value)
        got = cache.dtypes.get(key_t)
    except TypeError:  # something unhashable inside
        raise _BadEntry(f"{key} is not a list of dtype names") from None
    if got is None:
        if not all(type(d) is str and len(d) <= 64 for d in value):
            raise _BadEntry(f"{key} is not a list of dtype names")
        got = cache.dtypes[key_t] = key_t
    return got


def _time(raw: dict[str, Any], key: str) -> int | None:
    value = _int_field(raw, key)
    return value if value else None  # JSON dumps write a missing time as 0


def _peers(op: str, meta: str) -> tuple[int | None, int | None] | None:
    """`send 1->2` is (1, 2); `recv 3<-0` is (0, 3); `?` is an unknown peer."""

    def num(text: str) -> int | None:
        text = text.strip()
        if text == "?":
            return None
        if not text.isdigit() or len(text) > 10:
            raise _BadEntry(f"peer {text[:20]!r} in profiling_name is not a rank")
        return int(text)

    if op == "send" and "->" in meta:
        src, dst = meta.split("->", 1)
        return num(src), num(dst)
    if op == "recv" and "<-" in meta:
        dst, src = meta.split("<-", 1)
        return num(src), num(dst)
    return None


class _Cache:
    """Per dump: what many entries share is checked once. torch's pickler writes one
    frame table and one group tuple that every entry refers to, and profiling names and
    dtype lists repeat; a shared object is checked once, by identity (the decoded dump
    holds every object alive while it is checked)."""

    def __init__(self) -> None:
        self.names: dict[str, tuple[str, str, tuple[int | None, int | None] | None]] = {}
        self.frames: dict[int, Frame] = {}
        self.groups: dict[int, tuple[str, str]] = {}
        self.dtypes: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.sizes: dict[tuple[tuple[Any, ...], ...], tuple[tuple[int, ...], ...]] = {}
        self.fps: dict[tuple[object, ...], tuple[object, ...]] = {}

    def fingerprint(self, *parts: object) -> tuple[object, ...]:
        """One shared tuple per distinct fingerprint (its parts are shared already)."""
        got = self.fps.get(parts)
        if got is None:
            got = self.fps[parts] = parts
        return got

    def name(self, name: Any) -> tuple[str, str, tuple[int | None, int | None] | None]:
        if type(name) is not str or len(name) > 256:
            raise _BadEntry("profiling_name missing or not text")
        got = self.names.get(name)
        if got is None:
            backend, _, rest = name.rpartition(":")
            op, _, meta = rest.partition(" ")
            if not op:
                raise _BadEntry(f"profiling_name {name[:40]!r} names no operation")
            got = self.names[name] = (backend, op, _peers(op, meta))
        return got

    def frame(self, f: Any) -> Frame:
        got = self.frames.get(id(f))
        if got is None:
            if not isinstance(f, dict):
                raise _BadEntry("frames holds something other than a frame")
            filename, name, line = f.get("filename"), f.get("name"), f.get("line")
            if type(filename) is not str or type(name) is not str or type(line) is not int:
                raise _BadEntry("a frame lacks its filename, name or line")
            if not INT_MIN <= line <= INT_MAX:
                raise _BadEntry("a frame's line does not fit 64 bits")
            got = self.frames[id(f)] = Frame(filename[:MAX_TEXT], line, name[:MAX_TEXT])
        return got

    def group(self, pg: Any, pg_id: int | None) -> tuple[str, str]:
        if pg is None:
            return (str(pg_id) if pg_id is not None else ""), ""
        got = self.groups.get(id(pg))
        if got is None:
            if not (
                isinstance(pg, list | tuple)
                and len(pg) == 2
                and type(pg[0]) is str
                and type(pg[1]) is str
            ):
                raise _BadEntry("process_group is not (name, description)")
            got = self.groups[id(pg)] = (pg[0][:MAX_TEXT], pg[1][:MAX_TEXT])
        return got


def _entry(index: int, raw: Any, cache: _Cache) -> Entry:
    if type(raw) is not dict:
        raise _BadEntry(f"is {type(raw).__name__}, not a table")
    get = raw.get
    backend, op, peers = cache.name(get("profiling_name"))
    seq = get("collective_seq_id")
    if seq is None:
        seq = get("seq_id")  # format 1.x
    if type(seq) is not int:
        raise _BadEntry(
            "no collective_seq_id (or seq_id)"
            if seq is None
            else f"collective_seq_id is {type(seq).__name__}, expected an integer"
        )
    if not INT_MIN <= seq <= INT_MAX:
        raise _BadEntry("collective_seq_id does not fit 64 bits")
    pg_id = _int_field(raw, "pg_id")
    pg_name, pg_desc = cache.group(get("process_group"), pg_id)
    state = get("state", "scheduled")
    if type(state) is not str or state not in _STATES:
        raise _BadEntry(f"state {str(state)[:20]!r} is none of scheduled, started, completed")
    retired = get("retired")
    if retired is not None and type(retired) is not bool:
        raise _BadEntry("retired is not a boolean")
    is_p2p = get("is_p2p")
    if is_p2p is None:
        is_p2p = op in ("send", "recv")
    elif type(is_p2p) is not bool:
        raise _BadEntry("is_p2p is not a boolean")
    record_id = _int_field(raw, "record_id")
    in_sizes = _sizes(raw, "input_sizes", cache)
    out_sizes = _sizes(raw, "output_sizes", cache)
    in_dtypes = _dtypes(raw, "input_dtypes", cache)
    out_dtypes = _dtypes(raw, "output_dtypes", cache)
    frames = get("frames")
    if frames is None:
        checked_frames: tuple[Frame, ...] = ()
    elif type(frames) is list:
        checked_frames = tuple(cache.frame(f) for f in frames[:MAX_FRAMES])
    else:
        raise _BadEntry(f"frames is {type(frames).__name__}, expected a list")
    return Entry(
        pos=index,
        record_id=index if record_id is None else record_id,
        pg=pg_name,
        pg_desc=pg_desc,
        pg_id=pg_id,
        seq=seq,
        p2p_seq=_int_field(raw, "p2p_seq_id"),
        is_p2p=is_p2p,
        op=op,
        backend=backend,
        peers=peers,
        input_sizes=in_sizes,
        output_sizes=out_sizes,
        input_dtypes=in_dtypes,
        output_dtypes=out_dtypes,
        state=state,
        retired=retired,
        time_created_ns=_time(raw, "time_created_ns"),
        time_started_ns=_time(raw, "time_discovered_started_ns"),
        time_completed_ns=_time(raw, "time_discovered_completed_ns"),
        timeout_ms=_int_field(raw, "timeout_ms"),
        frames=checked_frames,
        fp=cache.fingerprint(op, in_sizes, out_sizes, in_dtypes, out_dtypes),
    )
