"""Prometheus metrics: HTTP ``GET /metrics`` in text exposition format 0.0.4.

Two vocabularies are served side by side from one computation: StreamDB's own
series (``streamdb_*``, labels ``db="0"``, ``key``, ``group``, ``consumer``; those
named ``streamdb_stream_group_*`` say ``stream`` for ``key``, as the next) and
the names oliver006/redis_exporter gives the same things (``redis_*``, labels
``db="db0"``, ``stream``, ``group``, ``consumer``, its types and HELP texts), so
that dashboards and alerts written for Redis read a StreamDB unchanged.  A value
both have is computed once and written under both names (``REDIS_EXPORTER_NAMES``);
redis_exporter families StreamDB has no own name for are declared in
``_REDIS_EXPORTER_FAMILIES``.  Adding a series is a line in a family table and an
``out.add`` where its value is known (for a stream's, group's or consumer's: a name in
``_STREAM_SERIES``/``_GROUP_SERIES``/``_CONSUMER_SERIES`` and its column, a value per
entity, at the same place in the tuple the function beside it returns; those are
formatted a column at a time, ``Table``).

The endpoint runs on the server's own event loop (``start_metrics`` is called
from ``Server.start`` when ``metrics-port`` is set), so a scrape reads the
keyspace directly, without locks or copies.  That is also why its work is bounded:

* the streams are read in slices of ``SLICE_SECONDS`` of loop time (and at most one
  batch of ``STREAMS_PER_BATCH`` more), the loop serving clients between two slices
  (a scrape is not a point-in-time snapshot: a stream is read as it is when its
  turn comes; one deleted meanwhile is left out);
* at most ``metrics-max-series`` streams + groups + consumers are exported per
  scrape; the rest are only counted (``streamdb_metrics_series_truncated``);
* the reply is written ``WRITE_SLICE_BYTES`` at a time, the loop serving clients
  between two writes;
* a request head larger than ``MAX_REQUEST_BYTES`` gets 431, one that does not
  arrive within ``REQUEST_TIMEOUT`` seconds is dropped, a reader that does not
  take the reply within ``WRITE_TIMEOUT`` seconds is dropped, and at most
  ``MAX_CONNECTIONS`` scrapes are open at once (more are closed on accept).

``render`` is a function of the core's state and a clock reading (the same
slices, run without yielding), so it is what the tests read through a real
HTTP scrape.
"""

from __future__ import annotations

import asyncio
import os
import time
from itertools import chain, compress, islice, repeat
from operator import attrgetter, itemgetter, rshift

from .. import log
from ..engine.groups import ENTRIES_READ_INVALID
from ..engine.lag import groups_progress
from ..engine.nodecache import CACHE
from ..engine.stream import Stream
from ..memory import rss_memory, used_memory
from .columns import present_mask, value_texts

__all__ = ["start_metrics", "render", "render_sliced", "ScrapeRecord", "Exposition", "Table", "Labels",
           "escape_label_value", "REDIS_EXPORTER_NAMES"]

MAX_REQUEST_BYTES = 8192
REQUEST_TIMEOUT = 5.0
WRITE_TIMEOUT = 10.0
MAX_CONNECTIONS = 16
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# The longest a scrape holds the loop in one go (issue 30: a scrape of 1,000
# streams x 3 groups must not pause the loop for more than 5 ms).  A slice's wall
# time also holds the time the process waits for a CPU: at 2 ms, the longest slice
# of a run of tools/bench_metrics.py reached 5.3-5.7 ms on this 2-CPU machine; at
# 1 ms, 1.9-4.1 ms, the scrapes as long within the run-to-run noise.
SLICE_SECONDS = 0.001
# The most of a reply written in one go.  The 4.5 MB of a scrape of 1,000 streams x 3
# groups handed to the socket at once held the loop 1.5-3.5 ms in one writev (strace
# -T, loaded machine), on top of the slices; 256 KiB is copied in ~0.1 ms.
WRITE_SLICE_BYTES = 256 * 1024


def escape_label_value(text: str) -> str:
    """The exposition format's label escaping: backslash, double quote, newline."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _key_text(raw: bytes) -> str:
    # Keys are binary; a label must be UTF-8.  Invalid bytes become \xNN so two
    # different keys never share a label value.
    return raw.decode("utf-8", "backslashreplace")


# Key, group and consumer names as escaped label values, kept across scrapes: the
# same names come back every scrape (and a group name in many streams), and
# decoding and escaping them was a fifth of a scrape's time.  Emptied when it
# outgrows LABEL_CACHE_MAX (keys come and go).
_label_values: dict[bytes, str] = {}
LABEL_CACHE_MAX = 20_000        # (~3 MB at most: a name, its text and a dict slot each)


def _label_value(raw: bytes) -> str:
    text = _label_values.get(raw)
    if text is None:
        if len(_label_values) >= LABEL_CACHE_MAX:
            _label_values.clear()
        text = _label_values[raw] = escape_label_value(_key_text(raw))
    return text


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if value != value:
        return "NaN"
    return repr(float(value))


# A family writes its samples' labels in one of three forms (``Labels``):
OWN = 0       # StreamDB's: db="0",key="orders",group="billing"
REDIS = 1     # redis_exporter's: db="db0",stream="orders",group="billing"
STREAM = 2    # StreamDB's db number with redis_exporter's names: db="0",stream="orders",...
# StreamDB families named after redis_exporter's stream group series speak its label
# names too (dashboards join them with redis_stream_group_* on stream and group).
STREAM_FORM_PREFIX = "streamdb_stream_group_"


def _label_forms(name: str, value: str) -> tuple[tuple[str, str], ...]:
    """One StreamDB label in the three forms: ``key`` is redis_exporter's ``stream``,
    and its ``db`` is INFO keyspace's field name (``db0``)."""
    if name == "key":
        return (name, value), ("stream", value), ("stream", value)
    if name == "db":
        return (name, value), (name, "db" + value), (name, value)
    return ((name, value),) * 3


def _label_text(labels) -> str:
    return ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels)


class Labels:
    """An entity's labels, escaped and joined once, in the three forms (``own``,
    ``redis``, ``stream``: OWN, REDIS, STREAM above).  Each family writes its own.
    ``encoded``: the three by form, UTF-8 and closed as a sample line has them ('} '
    after them, before the value): a Table's lines are joined as bytes.
    ``children``: for a stream's or a group's labels (``below`` names the labels of
    the levels under it: "group", "consumer"), its groups' or consumers' Labels by
    name (``_Children``); None for the rest."""

    __slots__ = ("own", "redis", "stream", "encoded", "children")

    def __init__(self, own: str = "", redis: str = "", stream: str = "", below: tuple[str, ...] = ()) -> None:
        self.own, self.redis, self.stream = own, redis, stream
        self.encoded = tuple(f"{text}}} ".encode() for text in (own, redis, stream))
        self.children = _Children((own, redis, stream), below) if below else None

    @classmethod
    def of(cls, labels: dict[str, str]) -> "Labels":
        forms = [_label_forms(k, v) for k, v in labels.items()]
        return cls(*(_label_text(f[i] for f in forms) for i in (OWN, REDIS, STREAM)))

    def child(self, name: str, raw: bytes) -> "Labels":
        """These labels and one more (a group's or consumer's name), named alike in
        every form."""
        return _labels_below((self.own, self.redis, self.stream), (name,), raw)


def _labels_below(texts: tuple[str, str, str], below: tuple[str, ...], raw: bytes) -> Labels:
    """The Labels of ``texts`` (own, redis, stream) and one more, ``below[0]`` =
    ``raw``, named alike in every form; ``below[1:]`` are the levels under that."""
    text = f'{below[0]}="{_label_value(raw)}"'
    own, redis, stream = texts
    return Labels(f"{own},{text}", f"{redis},{text}", f"{stream},{text}", below[1:])


_NO_LABELS = Labels()

# Streams', groups' and consumers' Labels, kept across scrapes as the label values
# above are: a stream's here, by (db, key); a group's in its stream's Labels'
# ``children``, a consumer's in its group's.  Building them, four f-strings and an
# object per group or consumer, was a third of the traversal's CPU time (12 of 38 ms,
# tools/bench_metrics.py's keyspace, in-process).  All are dropped (this emptied)
# when LABEL_CACHE_MAX have been made since the last time (~8 MB at most: three
# label texts, an object and a dict slot each).
_entity_labels: dict[tuple, Labels] = {}
_labels_made = 0


def _count_made_labels() -> None:
    """Notes one more cached Labels; drops them all first when the cache is full."""
    global _labels_made
    if _labels_made >= LABEL_CACHE_MAX:
        _entity_labels.clear()
        _labels_made = 0
    _labels_made += 1


class _Children(dict):
    """A stream's groups' or a group's consumers' Labels, by name, each made when it
    is first asked for (``__missing__``): a batch finds all of a stream's or group's
    with one ``map`` of ``__getitem__`` (C), where a Python call per group and per
    consumer (a tuple key, a look-up) took ~20% of a scrape.  Keeps its parent's
    texts, not the parent (no reference cycle: freed as soon as the parent is)."""

    __slots__ = ("texts", "below")

    def __init__(self, texts: tuple[str, str, str], below: tuple[str, ...]) -> None:
        super().__init__()
        self.texts, self.below = texts, below

    def __missing__(self, raw: bytes) -> Labels:
        _count_made_labels()
        labels = self[raw] = _labels_below(self.texts, self.below, raw)
        return labels


def _stream_labels(db: str, key: bytes) -> Labels:
    labels = _entity_labels.get((db, key))
    if labels is None:
        _count_made_labels()
        key_label = _label_value(key)
        labels = _entity_labels[db, key] = Labels(
            f'db="{db}",key="{key_label}"', f'db="db{db}",stream="{key_label}"',
            f'db="{db}",stream="{key_label}"', ("group", "consumer"))
    return labels


class _Family:
    __slots__ = ("name", "kind", "help", "form", "samples", "put", "alias", "columns")

    def __init__(self, name: str, kind: str, help_text: str, form: int) -> None:
        self.name, self.kind, self.help = name, kind, help_text
        self.form = form                      # which of a Labels' texts this family writes
        self.samples: list[str] = []
        self.put = self.samples.append
        self.alias: _Family | None = None     # redis_exporter's name for the same values
        # (table, column index) of every Table this family's values are a column of;
        # written after ``samples``.
        self.columns: list[tuple[Table, int]] = []

    def lines(self, kept: dict, keep: dict):
        """This family's sample lines, UTF-8, a piece (lines, each ending in a newline)
        per at most ROWS_PER_PIECE of them.  A table's piece of the same entities'
        Labels and the same ints as one in ``kept`` (the scrape before's) is that piece
        again, its texts not even made; each is put in ``keep`` for the next scrape
        (those of ages and of columns not all ints are not: see _kept_pieces)."""
        if self.samples:
            yield ("\n".join(self.samples) + "\n").encode()
        # Values are turned to text a piece at a time, once for a family and its alias.
        first = self.name.encode() + b"{"
        for table, index in self.columns:
            rows, values = table.present(index)
            reusable = table.reusable(index)
            for start in range(0, len(values), ROWS_PER_PIECE):
                end = start + ROWS_PER_PIECE
                piece_rows, piece_values = rows[start:end], values[start:end]
                key = (self.name, table.names, start)
                if reusable:
                    before = kept.get(key)
                    if before is not None and before[0] == piece_rows and before[1] == piece_values:
                        keep[key] = before
                        yield before[2]
                        continue
                piece = _sample_lines(first, *table.texts(index, self.form, start, end))
                if reusable:
                    keep[key] = piece_rows, piece_values, piece
                yield piece


def _sample_lines(first: bytes, labels: list[bytes], values: list[bytes]) -> bytes:
    """'name{labels} value\n' per row (``first`` is 'name{', ``labels`` Labels.encoded,
    closed by '} '), joined in C: the three pieces of every line are laid out in one
    list by slice assignment, so that no line is built on its own (a concatenation per
    line took twice as long as this).  Bytes, as the endpoint sends them: 4.5 MB of
    text encoded once more took ~4 ms a scrape."""
    parts = [b"\n" + first, None, None] * len(values)
    parts[0] = first
    parts[1::3] = labels
    parts[2::3] = values
    parts.append(b"\n")
    return b"".join(parts)


# The most lines joined in one go (~0.1 ms): a family of a big keyspace is written in
# pieces, each of which may end a slice of the loop's time.
ROWS_PER_PIECE = 1000

# The pieces of table lines the last scrape wrote, by (family, table, first row):
# (the rows' Labels, their values, piece); only those of columns that hold ints, not
# ages.  Counts mostly stay the same from one scrape to the next; comparing two
# pieces' Labels and values (C, a pointer or a few bytes each: ~5 us for 1,000 lines)
# spares making their texts and joining them, and sending the same bytes object again
# spares the allocation of fresh pages for it.  A kept piece is never stale: a Labels
# is never changed once made, and has no __eq__ (two are equal when they are the same
# object: the same texts); equal ints have the same text (a table's values are ints).
# (~3.5 MB for tools/bench_metrics.py's keyspace: the 70%
# of its text that is not ages.)
_kept_pieces: dict[tuple, tuple[list[Labels], list[int], bytes]] = {}


class Table:
    """The series of one kind of entity (stream, group or consumer): a column of values
    per family, ints (None where an entity's series is absent), beside a column of the
    entities' Labels.

    A scrape of 1,000 streams x 3 groups writes ~45,000 lines, nearly all from
    tables.  Formatting each line in Python (a call, an f-string, an append: ~1 us a
    line) was most of a scrape's time; a table turns each column's values into text
    once (server/columns.py's ``value_texts``, compiled) and ``_Family.lines`` joins
    a family's lines in C.
    Measured in-process on tools/bench_metrics.py's keyspace, plain Python, with the
    entity labels cached (_entity_labels): 85 -> 61 ms of CPU a scrape
    (time.process_time, best of 3 alternated runs, loaded machine); 103 -> 79 million
    instructions a scrape of 300 streams x 3 groups (callgrind).

    The columns named in ``milliseconds`` hold whole milliseconds, written as seconds
    (an age: the clock's reading less a time)."""

    __slots__ = ("names", "columns", "labels", "_milliseconds", "_present", "_texts", "_labels")

    def __init__(self, names: tuple[str, ...], milliseconds=frozenset()) -> None:
        self.names = names
        self.labels: list[Labels] = []
        self.columns: list[list] = [[] for _ in names]
        self._milliseconds = [name in milliseconds for name in names]            # by column
        self._present: dict[int, tuple[list[bool] | None, list, list]] = {}  # by column
        self._texts: dict[tuple[int, int], list[bytes]] = {}     # by (column, first row)
        self._labels: dict = {}                # by form, and by (form, column): present rows'

    def add(self, labels: Labels, values: tuple) -> None:
        """A row: ``values`` in the order of ``names``."""
        self.extend([labels], [[value] for value in values])

    def extend(self, labels, columns) -> None:
        """Rows, given by column: ``labels`` (a sequence of Labels) and ``columns`` in
        the order of ``names``, each a sequence as long as ``labels``."""
        self.labels += labels
        for column, values in zip(self.columns, columns):
            column += values

    def present(self, index: int) -> tuple[list[Labels], list]:
        """(Labels, values) of the rows whose column ``index`` holds a value."""
        _, rows, values = self._present_rows(index)
        return rows, values

    def reusable(self, index: int) -> bool:
        """Whether column ``index``'s pieces may be kept for the next scrape (and one
        kept taken again): not ages (the clock moves)."""
        return not self._milliseconds[index]

    def texts(self, index: int, form: int, start: int, end: int) -> tuple[list[bytes], list[bytes]]:
        """(label texts in ``form``, value texts), UTF-8, of rows ``start:end`` of those
        ``present`` gives.  The values are turned to text a piece at a time (once for a
        family and its alias): a column of 3,000 ages took ~1-3 ms in one go, longer
        than a slice of the loop's time may run over."""
        texts = self._texts.get((index, start))
        if texts is None:
            values = self._present_rows(index)[2][start:end]
            texts = self._texts[index, start] = value_texts(values, self._milliseconds[index])
        labels = self._labels.get((form, index))
        if labels is None:
            every_row = self._labels.get(form)
            if every_row is None:
                every_row = self._labels[form] = list(map(itemgetter(form), map(_ENCODED, self.labels)))
            present = self._present_rows(index)[0]
            labels = self._labels[form, index] = every_row if present is None else list(compress(every_row, present))
        return labels[start:end], texts

    def _present_rows(self, index: int) -> tuple[list[bool] | None, list[Labels], list]:
        """(which rows hold a value in column ``index``, None when all do; their
        Labels; their values)."""
        rows = self._present.get(index)
        if rows is None:
            values = self.columns[index]
            present = present_mask(values)
            if present is not None:
                rows = present, list(compress(self.labels, present)), list(compress(values, present))
            else:
                rows = None, self.labels, values
            self._present[index] = rows
        return rows


_FORM_TEXT = (attrgetter("own"), attrgetter("redis"), attrgetter("stream"))   # by form
_ENCODED = attrgetter("encoded")


class Exposition:
    """Collects samples per metric family and writes them grouped, HELP and TYPE first."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}

    def declare(self, name: str, kind: str, help_text: str, form: int | None = None) -> None:
        """A family; its labels' ``form`` is OWN, or STREAM for a name that starts
        with STREAM_FORM_PREFIX, unless given."""
        if form is None:
            form = STREAM if name.startswith(STREAM_FORM_PREFIX) else OWN
        if name not in self._families:
            self._families[name] = _Family(name, kind, help_text, form)

    def alias(self, name: str, alias: str, help_text: str) -> None:
        """Every sample added to ``name`` is written under ``alias`` too (same type,
        redis_exporter's labels)."""
        family = self._families[name]
        self.declare(alias, family.kind, help_text, form=REDIS)
        family.alias = self._families[alias]

    def add(self, name: str, value: float, labels: Labels | dict | None = None) -> None:
        """One sample; an int or a float formats as the exposition format wants
        (Go's ParseFloat reads Python's "nan" too)."""
        if labels is None:
            labels = _NO_LABELS
        elif labels.__class__ is not Labels:
            labels = Labels.of(labels)
        own = self._families[name]
        for family in (own, own.alias):
            if family is not None:
                text = _FORM_TEXT[family.form](labels)
                family.put(f"{family.name}{{{text}}} {value}" if text else f"{family.name} {value}")

    def table(self, names: tuple[str, ...], milliseconds=frozenset()) -> Table:
        """A Table whose columns are the samples of the families ``names`` (and their
        aliases), written after each family's ``add``-ed samples (a None value is left
        out); those of the families in ``milliseconds`` hold whole ms, written as seconds."""
        table = Table(names, milliseconds)
        for index, name in enumerate(names):
            family = self._families[name]
            family.columns.append((table, index))
            if family.alias is not None:
                family.alias.columns.append((table, index))
        return table

    def add_histogram(self, name: str, bounds, counts: list[int], total: float) -> None:
        """A histogram without labels: ``counts`` per bucket (one past ``bounds``,
        the +Inf one), ``total`` the sum of the observations."""
        samples = self._families[name].samples
        cumulative = 0
        for bound, count in zip([*map(_number, bounds), "+Inf"], counts):
            cumulative += count
            samples.append(f'{name}_bucket{{le="{bound}"}} {cumulative}')
        samples.append(f"{name}_sum {_number(total)}")
        samples.append(f"{name}_count {cumulative}")

    def chunks(self):
        """The text, UTF-8, in pieces, each ending in a newline: a family's HELP and
        TYPE lines, then its samples in pieces of at most ROWS_PER_PIECE lines.  Once
        all are written, their table pieces are the ones kept for the next scrape."""
        global _kept_pieces
        kept, keep = _kept_pieces, {}
        for family in self._families.values():
            yield f"# HELP {family.name} {_escape_help(family.help)}\n# TYPE {family.name} {family.kind}\n".encode()
            yield from family.lines(kept, keep)
        _kept_pieces = keep

    def text(self) -> str:
        return b"".join(self.chunks()).decode()


# (name, type, help) of every StreamDB family, declared up front so that HELP/TYPE
# lines are present even when a scrape has no sample of a family.
_FAMILIES = [
    ("streamdb_uptime_seconds", "gauge", "Seconds since the server started."),
    ("streamdb_connected_clients", "gauge", "Client connections (INFO connected_clients)."),
    ("streamdb_blocked_clients", "gauge", "Clients blocked in XREAD/XREADGROUP/WAIT."),
    ("streamdb_used_memory_bytes", "gauge",
     "Bytes the allocators hand out: data, buffers, the server's objects (INFO used_memory)."),
    ("streamdb_used_memory_rss_bytes", "gauge", "Resident memory of the server process (INFO used_memory_rss)."),
    ("streamdb_commands_processed_total", "counter", "Commands processed since start (or CONFIG RESETSTAT)."),
    ("streamdb_aof_enabled", "gauge", "1 when the append-only file is on."),
    ("streamdb_aof_last_write_ok", "gauge", "1 when the last AOF write and fsync succeeded; 0 while a failed one is retried and writes are refused (MISCONF)."),
    ("streamdb_aof_size_bytes", "gauge", "Size of the AOF: base segment plus incremental segments."),
    ("streamdb_aof_fsync_duration_seconds", "histogram", "Time the AOF's fdatasync calls took (appendfsync always: on the loop; everysec: on the aof-fsync thread); absent without an AOF."),
    ("streamdb_snapshot_last_save_timestamp_seconds", "gauge", "Unix time of the last successful snapshot (start time if none)."),
    ("streamdb_snapshot_changes_since_last_save", "gauge", "Writes since the last snapshot (INFO rdb_changes_since_last_save)."),
    ("streamdb_snapshot_bgsave_in_progress", "gauge", "1 while a snapshot child runs."),
    ("streamdb_snapshot_last_bgsave_ok", "gauge", "1 when the last snapshot succeeded."),
    ("streamdb_replication_role", "gauge", "Always 1; the role label is master or slave (INFO role)."),
    ("streamdb_replication_offset_bytes", "gauge", "Replication stream offset (INFO master_repl_offset)."),
    ("streamdb_connected_replicas", "gauge", "Replicas connected to this server."),
    ("streamdb_replica_lag_bytes", "gauge", "Bytes of the replication stream a replica has not acknowledged."),
    ("streamdb_replica_lag_seconds", "gauge", "Seconds since a replica's last acknowledgement."),
    ("streamdb_master_link_up", "gauge", "On a replica: 1 when the link to the primary is up."),
    ("streamdb_stream_length", "gauge", "Entries in the stream (XLEN)."),
    ("streamdb_stream_last_entry_age_seconds", "gauge", "Seconds between now and the time part of the stream's last entry id."),
    ("streamdb_stream_entries_added_total", "counter", "Entries ever added to the stream (XINFO STREAM entries-added)."),
    ("streamdb_stream_retention_trimmed_entries_total", "counter", "Entries retention removed from the stream since start (STREAMDB.RETENTION GET trimmed-entries); absent before its first trim."),
    ("streamdb_retention_trimmed_entries_total", "counter", "Entries retention removed from all streams since start (INFO stream_retention_trimmed_entries)."),
    ("streamdb_stream_cache_size_bytes", "gauge", "stream-cache-size: bytes of sealed stream nodes kept in memory once on disk (0 = all in memory)."),
    ("streamdb_stream_cache_resident_bytes", "gauge", "Bytes of sealed stream nodes on disk that are also in memory (INFO stream_cache_resident_bytes)."),
    ("streamdb_stream_cache_cold_reads_total", "counter", "Stream nodes read back from disk (INFO stream_cache_cold_reads)."),
    ("streamdb_stream_cache_hits_total", "counter", "Reads of on-disk stream nodes that found them in memory (INFO stream_cache_hits)."),
    ("streamdb_stream_cache_evictions_total", "counter", "Stream nodes dropped from memory past the cache size (INFO stream_cache_evictions)."),
    ("streamdb_group_lag", "gauge", "Entries not yet delivered to the group (XINFO GROUPS lag); absent when Redis reports it as unknown."),
    ("streamdb_group_pending", "gauge", "Entries delivered to the group and not acknowledged (PEL size)."),
    ("streamdb_group_oldest_pending_idle_seconds", "gauge", "Seconds since the lowest-id pending entry was last delivered; absent when nothing is pending."),
    ("streamdb_group_entries_read", "gauge", "The group's entries-read counter; absent when unknown."),
    ("streamdb_stream_group_lag_seconds", "gauge", "Age of the oldest entry the group has not been given (its id's time; STREAMDB.GROUP INFO lag-ms); 0 when it has been given everything."),
    ("streamdb_stream_group_oldest_pending_seconds", "gauge", "Age of the group's oldest pending entry (its id's time; STREAMDB.GROUP INFO oldest-pending-ms); 0 when nothing is pending."),
    ("streamdb_stream_group_dead_lettered_total", "counter", "Entries the group's dead-letter policy moved to its dead-letter stream (STREAMDB.GROUP GET dead-lettered)."),
    ("streamdb_consumer_pending", "gauge", "Entries pending for the consumer."),
    ("streamdb_consumer_idle_seconds", "gauge", "Seconds since the consumer's last interaction (XINFO CONSUMERS idle)."),
    ("streamdb_metrics_series_truncated", "gauge", "Streams, groups and consumers left out of this scrape by metrics-max-series."),
    ("streamdb_metrics_scrape_errors_total", "counter", "Scrapes that failed inside the server (logged)."),
    ("streamdb_metrics_last_scrape_duration_seconds", "gauge", "How long the previous scrape took in the server, its slices and the loop turns between them; absent on the first."),
    ("streamdb_metrics_last_scrape_longest_slice_seconds", "gauge", "The longest the previous scrape held the event loop in one go; absent on the first."),
]

# redis_exporter's name and HELP text for a StreamDB family's values: every sample
# of the StreamDB family is written under this name too, with redis_exporter's
# labels (its types are the same).  Its HELP texts are kept as it writes them.
REDIS_EXPORTER_NAMES = {
    "streamdb_uptime_seconds": ("redis_uptime_in_seconds", "uptime_in_seconds metric"),
    "streamdb_connected_clients": ("redis_connected_clients", "connected_clients metric"),
    "streamdb_blocked_clients": ("redis_blocked_clients", "blocked_clients metric"),
    "streamdb_used_memory_bytes": ("redis_memory_used_bytes", "memory_used_bytes metric"),
    "streamdb_used_memory_rss_bytes": ("redis_memory_used_rss_bytes", "memory_used_rss_bytes metric"),
    "streamdb_commands_processed_total": ("redis_commands_processed_total", "commands_processed_total metric"),
    "streamdb_aof_enabled": ("redis_aof_enabled", "aof_enabled metric"),
    "streamdb_snapshot_last_save_timestamp_seconds": ("redis_rdb_last_save_timestamp_seconds", "rdb_last_save_timestamp_seconds metric"),
    "streamdb_snapshot_changes_since_last_save": ("redis_rdb_changes_since_last_save", "rdb_changes_since_last_save metric"),
    "streamdb_snapshot_bgsave_in_progress": ("redis_rdb_bgsave_in_progress", "rdb_bgsave_in_progress metric"),
    "streamdb_replication_offset_bytes": ("redis_master_repl_offset", "master_repl_offset metric"),
    "streamdb_connected_replicas": ("redis_connected_slaves", "connected_slaves metric"),
    "streamdb_stream_length": ("redis_stream_length", "The number of elements of the stream"),
    "streamdb_group_lag": ("redis_stream_group_lag", "The number of messages waiting to be delivered to the stream group's consumers"),
    "streamdb_group_pending": ("redis_stream_group_messages_pending", "Pending number of messages in that stream group"),
    "streamdb_group_entries_read": ("redis_stream_group_entries_read", "Total number of entries read from the stream group"),
    "streamdb_consumer_pending": ("redis_stream_group_consumer_messages_pending", "Pending number of messages for this specific consumer"),
    "streamdb_consumer_idle_seconds": ("redis_stream_group_consumer_idle_seconds", "Consumer idle time in seconds"),
}

# redis_exporter families with no StreamDB name of their own: (name, type, help).
_REDIS_EXPORTER_FAMILIES = [
    ("redis_up", "gauge", "Information about the Redis instance"),
    ("redis_instance_info", "gauge", "Information about the Redis instance"),
    ("redis_start_time_seconds", "gauge", "Start time of the Redis instance since unix epoch in seconds."),
    ("redis_db_keys", "gauge", "Total number of keys by DB"),
    ("redis_db_keys_expiring", "gauge", "Total number of expiring keys by DB"),
    ("redis_commands_total", "counter", "Total number of calls per command"),
    ("redis_commands_duration_seconds_total", "counter", "Total amount of time in seconds spent per command"),
    ("redis_stream_groups", "gauge", "Groups count of stream"),
    ("redis_stream_last_generated_id", "gauge", "The epoch timestamp (ms) of the latest message on the stream"),
    ("redis_stream_group_consumers", "gauge", "Consumers count of stream group"),
    ("redis_stream_group_last_delivered_id", "gauge", "The epoch timestamp (ms) of the last delivered message"),
]


def _exposition() -> Exposition:
    """An empty exposition with every family (and redis_exporter's names) declared."""
    out = Exposition()
    for name, kind, help_text in _FAMILIES:
        out.declare(name, kind, help_text)
    for name, (alias, help_text) in REDIS_EXPORTER_NAMES.items():
        out.alias(name, alias, help_text)
    for name, kind, help_text in _REDIS_EXPORTER_FAMILIES:
        out.declare(name, kind, help_text, form=REDIS)
    return out


class ScrapeRecord:
    """What the endpoint knows of its own scrapes, exported by the next one."""

    __slots__ = ("errors", "last_seconds", "last_longest_slice")

    def __init__(self) -> None:
        self.errors = 0
        self.last_seconds: float | None = None
        self.last_longest_slice: float | None = None


def render(core, now: float | None = None, record: ScrapeRecord | None = None) -> str:
    """The whole exposition text for the core's current state, in one go."""
    body: list[bytes] = []
    for _ in _render_steps(core, core.clock() if now is None else now,
                           record or ScrapeRecord(), body):
        pass
    return b"".join(body).decode("utf-8")


async def render_sliced(core, record: ScrapeRecord) -> list[bytes]:
    """``render``'s text, encoded, in pieces; the loop runs other work whenever
    this has held it for SLICE_SECONDS.  Notes its duration and longest slice in
    ``record``."""
    body: list[bytes] = []
    clock = time.perf_counter
    started = slice_started = clock()
    longest = 0.0
    for _ in _render_steps(core, core.clock(), record, body):
        longest = max(longest, clock() - slice_started)
        await asyncio.sleep(0)
        slice_started = clock()
    ended = clock()
    record.last_seconds = ended - started
    record.last_longest_slice = max(longest, ended - slice_started)
    return body


class _Slice:
    """The loop time a scrape may take before it lets the loop run other work."""

    __slots__ = ("end",)

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.end = time.perf_counter() + SLICE_SECONDS

    def spent(self) -> bool:
        return time.perf_counter() >= self.end


def _render_steps(core, now: float, record: ScrapeRecord, body: list[bytes]):
    """Appends the encoded exposition to ``body``, a piece per family; yields
    whenever it has held the loop for SLICE_SECONDS (filling and encoding alike)."""
    loop_slice = _Slice()
    out = _exposition()
    _server_metrics(core, out, now)
    _keyspace_metrics(core, out)
    yield from _stream_metrics(core, out, now, core.config["metrics-max-series"], loop_slice)
    out.add("streamdb_metrics_scrape_errors_total", record.errors)
    if record.last_seconds is not None:
        out.add("streamdb_metrics_last_scrape_duration_seconds", record.last_seconds)
        out.add("streamdb_metrics_last_scrape_longest_slice_seconds", record.last_longest_slice)
    for chunk in out.chunks():
        body.append(chunk)
        if loop_slice.spent():
            yield
            loop_slice.restart()


def _server_metrics(core, out: Exposition, now: float) -> None:
    out.add("redis_up", 1)
    out.add("redis_start_time_seconds", int(core.start_time))
    out.add("streamdb_uptime_seconds", round(now - core.start_time, 3))
    out.add("streamdb_connected_clients", len(core.clients))
    out.add("streamdb_blocked_clients", sum(1 for c in core.clients.values() if c.blocked is not None))
    out.add("streamdb_used_memory_bytes", used_memory(core))
    out.add("streamdb_used_memory_rss_bytes", rss_memory())
    out.add("streamdb_commands_processed_total", core.stats.commands_processed)
    for name, stat in core.stats.commands.items():
        if stat.calls:
            labels = Labels.of({"cmd": name})
            out.add("redis_commands_total", stat.calls, labels)
            out.add("redis_commands_duration_seconds_total", stat.usec / 1e6, labels)
    out.add("streamdb_retention_trimmed_entries_total",
            core.retention.trimmed_entries if core.retention is not None else 0)

    cache = CACHE.stats()
    out.add("streamdb_stream_cache_size_bytes", cache["stream_cache_size"])
    out.add("streamdb_stream_cache_resident_bytes", cache["stream_cache_resident_bytes"])
    out.add("streamdb_stream_cache_cold_reads_total", cache["stream_cache_cold_reads"])
    out.add("streamdb_stream_cache_hits_total", cache["stream_cache_hits"])
    out.add("streamdb_stream_cache_evictions_total", cache["stream_cache_evictions"])

    persist = dict(core.info_persistence()) if core.info_persistence else {}
    aof = core.aof
    out.add("streamdb_aof_enabled", int(aof is not None))
    out.add("streamdb_aof_last_write_ok", int(persist.get("aof_last_write_status", "ok") == "ok"))
    if aof is not None:
        out.add("streamdb_aof_size_bytes", aof.total_size)
        fsyncs = aof.fsync_durations
        out.add_histogram("streamdb_aof_fsync_duration_seconds", fsyncs.BOUNDS,
                          list(fsyncs.counts), fsyncs.seconds)
    out.add("streamdb_snapshot_last_save_timestamp_seconds",
            int(persist.get("rdb_last_save_time", core.start_time)))
    out.add("streamdb_snapshot_changes_since_last_save",
            int(persist.get("rdb_changes_since_last_save", core.dirty)))
    out.add("streamdb_snapshot_bgsave_in_progress", int(persist.get("rdb_bgsave_in_progress", 0)))
    out.add("streamdb_snapshot_last_bgsave_ok", int(persist.get("rdb_last_bgsave_status", "ok") == "ok"))

    repl = core.replication
    is_replica = bool(core.is_replica and repl is not None and repl.replica is not None)
    role = "slave" if is_replica else "master"
    out.add("streamdb_replication_role", 1, {"role": role})
    _instance_info(core, out, role, repl.replid if repl is not None else "0" * 40)
    if repl is None:
        out.add("streamdb_connected_replicas", 0)
        return
    out.add("streamdb_replication_offset_bytes", repl.offset)
    mono = time.monotonic()        # ack times are monotonic readings
    live = [link for link in repl.links.values() if link.client.id in core.clients]
    out.add("streamdb_connected_replicas", len(live))
    for link in live:
        labels = {"replica": link.name}
        out.add("streamdb_replica_lag_bytes", max(repl.offset - link.ack_offset, 0), labels)
        out.add("streamdb_replica_lag_seconds", round(max(mono - link.ack_time, 0.0), 3), labels)
    if is_replica:
        out.add("streamdb_master_link_up", int(repl.replica.state == "connected"))


_OS = " ".join(os.uname()[i] for i in (0, 2, 4))   # as INFO server's os: system release machine


def _instance_info(core, out: Exposition, role: str, replid: str) -> None:
    """redis_instance_info: INFO server's identity fields as labels, value 1."""
    cfg = core.config
    out.add("redis_instance_info", 1, {
        "role": role, "redis_version": cfg["redis-version-compat"], "redis_build_id": "streamdb",
        "redis_mode": "standalone", "os": _OS, "maxmemory_policy": cfg["maxmemory-policy"],
        "tcp_port": str(cfg["port"]), "run_id": core.run_id, "process_id": str(os.getpid()),
        "master_replid": replid})


def _keyspace_metrics(core, out: Exposition) -> None:
    """INFO keyspace's counts, per database that has keys (as INFO lists them)."""
    for db in core.keyspace.dbs:
        if db.data:
            labels = Labels.of({"db": str(db.index)})
            out.add("redis_db_keys", len(db.data), labels)
            out.add("redis_db_keys_expiring", len(db.expires), labels)


def _stream_metrics(core, out: Exposition, now: float, budget: int, loop_slice: _Slice):
    """Per stream, group and consumer; each of them costs one unit of ``budget``.

    A generator: yields when ``loop_slice`` is spent.  The keys are listed first (a
    C-speed copy) and each looked up again when its turn comes, as the keyspace may
    change while the loop runs between two slices.  Streams are read in batches
    (``_Batch``): their groups and consumers listed, then their series computed a
    column at a time, in the same slice."""
    now_ms = int(now * 1000)
    truncated = 0
    tables = [out.table(names, _MILLISECONDS) for names in (_STREAM_SERIES, _GROUP_SERIES, _CONSUMER_SERIES)]
    batch = _Batch()
    for db, keys in [(db, list(db.data)) for db in core.keyspace.dbs if db.data]:
        dbl = str(db.index)
        for key in keys:
            if len(batch.streams) >= STREAMS_PER_BATCH or loop_slice.spent():
                batch = batch.write(tables, now_ms)
                if loop_slice.spent():
                    yield
                    loop_slice.restart()
            stream = db.data.get(key)
            if not isinstance(stream, Stream) or db.is_expired(key, now_ms):
                continue
            groups = stream.groups or {}
            consumers = list(map(_consumers, groups.values()))      # a dict per group
            size = 1 + len(groups) + sum(map(len, consumers))
            if size <= budget:
                budget -= size
            elif budget > 0:                 # the last one: only its first series
                truncated += size - budget
                groups, consumers = _first_series(groups, consumers, budget)
                budget = 0
            else:
                truncated += size
                continue
            batch.add(_stream_labels(dbl, key), stream, groups, consumers)
    batch.write(tables, now_ms)
    out.add("streamdb_metrics_series_truncated", truncated)


# The most streams of a batch.  Its columns are computed when it is full or the slice
# is spent, so a slice runs over SLICE_SECONDS by at most a batch's columns (~0.7 ms
# for 32 streams x 3 groups x 1 consumer, loaded machine).  Batches of 8 to 1,000
# streams took the same time a scrape.
STREAMS_PER_BATCH = 32


class _Batch:
    """Streams listed in one slice, until ``write`` computes their series, with the
    groups and consumers of theirs to export: a column each of their Labels, the
    streams, their numbers of groups, the dicts of their groups and the lists of
    their groups' dicts of consumers.

    A column at a time (``map`` over the batch's groups, rather than a function call
    and a tuple per group), ages in whole ms formatted once per distinct value, lines
    joined as bytes (``_sample_lines``), and the pieces that did not change sent again
    (``_kept_pieces``): a scrape's steps of tools/bench_metrics.py's keyspace took
    57.6 -> 36.4 ms of CPU, compiled core, in-process (time.process_time, best of 25
    alternated runs, loaded machine); 83 -> 65 million instructions a render of 300
    streams x 3 groups (callgrind; 83 -> 67 on the Python path).  The groups and
    consumers, and their Labels (``_Children``), are listed by chained ``map``s (C),
    not a Python loop: listing 1,000 streams x 3 groups x 1 consumer took 7.7 -> 3.2 ms
    of CPU (median of 30 alternated runs, in-process, compiled core)."""

    __slots__ = ("labels", "streams", "group_counts", "groups", "consumers")

    def __init__(self) -> None:
        self.labels: list[Labels] = []
        self.streams: list = []
        self.group_counts: list[int] = []
        self.groups: list[dict] = []              # name: group, per stream
        self.consumers: list[list[dict]] = []     # name: consumer, per group, per stream

    def add(self, labels: Labels, stream, groups: dict, consumers: list[dict]) -> None:
        """A stream, the ``groups`` of its to export and (a dict per group, in the same
        order) their ``consumers`` to export."""
        self.labels.append(labels)
        self.streams.append(stream)
        self.group_counts.append(len(stream.groups or ()))
        self.groups.append(groups)
        self.consumers.append(consumers)

    def write(self, tables, now_ms: int) -> "_Batch":
        """Adds the series of what this holds to ``tables`` (stream, group, consumer);
        returns an empty batch."""
        streams, groups, consumers = tables
        if not self.streams:
            return self
        streams.extend(self.labels, _stream_columns(self.streams, self.group_counts, now_ms))
        group_labels = list(_chained(map(map, map(_children_lookup, self.labels), self.groups)))
        if group_labels:
            group_streams = list(_chained(map(repeat, self.streams, map(len, self.groups))))
            group_objects = list(_chained(map(dict.values, self.groups)))
            groups.extend(group_labels, _group_columns(group_streams, group_objects, now_ms))
            consumer_dicts = list(_chained(self.consumers))
            consumer_labels = list(_chained(map(map, map(_children_lookup, group_labels), consumer_dicts)))
            if consumer_labels:
                consumer_objects = list(_chained(map(dict.values, consumer_dicts)))
                consumers.extend(consumer_labels, _consumer_columns(consumer_objects, now_ms))
        return _Batch()


_chained = chain.from_iterable
_children_lookup = attrgetter("children.__getitem__")      # a Labels' children's, by name


def _first_series(groups: dict, consumers: list[dict], budget: int) -> tuple[dict, list[dict]]:
    """The groups and consumers of a stream (``groups``, and ``consumers`` a dict per
    group) that fit in what ``budget`` leaves after the stream's own series, in
    order: a group, its consumers, the next group..."""
    budget -= 1
    kept_groups, kept_consumers = {}, []
    for (name, group), of_group in zip(groups.items(), consumers):
        if budget <= 0:
            break
        kept_groups[name] = group
        kept_consumers.append(dict(islice(of_group.items(), budget - 1)))
        budget -= 1 + len(kept_consumers[-1])
    return kept_groups, kept_consumers


# The series of streams, groups and consumers: a family's name in *_SERIES, its
# column (a value per entity of the batch) at the same place in the tuple *_columns
# returns (None for a series that is absent: unknown lag, nothing pending, ...).
# Ages are whole milliseconds, none negative, written as seconds (the families in
# _MILLISECONDS).

_last_id = attrgetter("last_id")
_length = attrgetter("length")
_entries_added = attrgetter("entries_added")
_retention = attrgetter("retention")
_pel = attrgetter("pel")
_consumers = attrgetter("consumers")
_entries_read = attrgetter("entries_read")
_dead_lettered = attrgetter("dead_lettered")
_pending = attrgetter("pending")
_seen_time = attrgetter("seen_time")

_STREAM_SERIES = (
    "streamdb_stream_length",
    "redis_stream_groups",
    "redis_stream_last_generated_id",
    "streamdb_stream_last_entry_age_seconds",
    "streamdb_stream_entries_added_total",
    "streamdb_stream_retention_trimmed_entries_total",
)


def _stream_columns(streams, group_counts, now_ms: int) -> tuple:
    last_ids = list(map(_last_id, streams))
    last_ms = [sid >> 64 for sid in last_ids]
    return (
        list(map(_length, streams)),
        group_counts,
        last_ms,
        # (an entry from the future, an id set ahead of the clock, is 0 old: as lag.py's ages)
        [(now_ms - ms if now_ms > ms else 0) if sid else None for sid, ms in zip(last_ids, last_ms)],
        list(map(_entries_added, streams)),
        [None if retention is None else retention.trimmed_entries or None
         for retention in map(_retention, streams)],
    )


_GROUP_SERIES = (
    "streamdb_group_lag",
    "streamdb_group_pending",
    "redis_stream_group_consumers",
    "redis_stream_group_last_delivered_id",
    "streamdb_group_oldest_pending_idle_seconds",
    "streamdb_group_entries_read",
    "streamdb_stream_group_lag_seconds",
    "streamdb_stream_group_oldest_pending_seconds",
    "streamdb_stream_group_dead_lettered_total",
)


def _group_columns(streams, groups, now_ms: int) -> tuple:
    """``streams[i]`` is the stream of ``groups[i]``."""
    lags, time_lags, oldest_ages, oldest_idles = groups_progress(streams, groups, now_ms)
    return (
        lags,
        list(map(len, map(_pel, groups))),
        list(map(len, map(_consumers, groups))),
        list(map(rshift, map(_last_id, groups), repeat(64))),       # an id's ms
        oldest_idles,
        [None if count == ENTRIES_READ_INVALID else count for count in map(_entries_read, groups)],
        time_lags,
        oldest_ages,
        list(map(_dead_lettered, groups)),
    )


_CONSUMER_SERIES = ("streamdb_consumer_pending", "streamdb_consumer_idle_seconds")


def _consumer_columns(consumers, now_ms: int) -> tuple:
    return (list(map(len, map(_pending, consumers))),
            [now_ms - seen if now_ms > seen else 0 for seen in map(_seen_time, consumers)])


_MILLISECONDS = frozenset({
    "streamdb_stream_last_entry_age_seconds",
    "streamdb_group_oldest_pending_idle_seconds",
    "streamdb_stream_group_lag_seconds",
    "streamdb_stream_group_oldest_pending_seconds",
    "streamdb_consumer_idle_seconds",
})


# ---------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 431: "Request Header Fields Too Large",
            500: "Internal Server Error", 503: "Service Unavailable"}


def _response(status: int, body: bytes | list[bytes], content_type: str = "text/plain; charset=utf-8",
              extra: str = "", head_only: bool = False) -> list[bytes]:
    """The response's pieces, to be written in order (a scrape's body comes in pieces)."""
    pieces = [body] if isinstance(body, bytes) else body
    head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {sum(map(len, pieces))}\r\n"
            f"{extra}Connection: close\r\n\r\n")
    return [head.encode("ascii")] + ([] if head_only else pieces)


class MetricsEndpoint:
    """The HTTP side: one short-lived connection per scrape."""

    def __init__(self, core) -> None:
        self.core = core
        self.open_connections = 0
        self.scrapes = ScrapeRecord()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open_connections >= MAX_CONNECTIONS:
            writer.writelines(_response(503, b"too many metrics connections\n"))
            writer.close()       # close() still sends what was written
            return
        self.open_connections += 1
        try:
            reply = await self._reply_for(reader)
            if reply is not None:
                await asyncio.wait_for(_write_in_slices(writer, reply), WRITE_TIMEOUT)
        except (asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            self.open_connections -= 1
            writer.close()

    async def _reply_for(self, reader: asyncio.StreamReader) -> list[bytes] | None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT)
        except asyncio.LimitOverrunError:
            return _response(431, b"request head too large\n")
        except asyncio.IncompleteReadError:
            return None               # the client went away mid-request
        except asyncio.TimeoutError:
            return _response(408, b"request timeout\n")
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _response(400, b"bad request\n")
        method, target = parts[0], parts[1]
        path = target.split("?", 1)[0]
        if path != "/metrics":
            return _response(404, b"not found\n")
        if method not in ("GET", "HEAD"):
            return _response(405, b"method not allowed\n", extra="Allow: GET, HEAD\r\n")
        try:
            body = await render_sliced(self.core, self.scrapes)
        except Exception as e:     # a bug here must not take the server down
            self.scrapes.errors += 1
            log.log(log.WARNING, f"Metrics scrape failed: {type(e).__name__}: {e}")
            return _response(500, b"scrape failed\n")
        return _response(200, body, CONTENT_TYPE, head_only=method == "HEAD")


async def _write_in_slices(writer: asyncio.StreamWriter, pieces: list[bytes]) -> None:
    """Writes ``pieces`` in order, at most about WRITE_SLICE_BYTES at a time, letting
    the loop run other work after each (drain alone would not: it returns at once
    while the socket takes everything)."""
    batch: list[bytes] = []
    size = 0
    for piece in pieces:
        batch.append(piece)
        size += len(piece)
        if size >= WRITE_SLICE_BYTES:
            writer.writelines(batch)
            batch, size = [], 0
            await writer.drain()
            await asyncio.sleep(0)
    writer.writelines(batch)
    await writer.drain()


async def start_metrics(core) -> list:
    """Listen on ``metrics-bind``:``metrics-port``; returns the asyncio servers."""
    cfg = core.config
    endpoint = MetricsEndpoint(core)
    servers = []
    for addr in cfg["metrics-bind"].split():
        srv = await asyncio.start_server(endpoint.handle, addr.lstrip("-"), cfg["metrics-port"],
                                         limit=MAX_REQUEST_BYTES, reuse_address=True)
        servers.append(srv)
    log.log(log.NOTICE, f"Metrics endpoint listening on {cfg['metrics-bind']} port {cfg['metrics-port']} (GET /metrics)")
    return servers
