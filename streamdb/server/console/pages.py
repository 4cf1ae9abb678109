"""The console's pages: server-rendered HTML, no script.

Every page reads through its session's client (``Session.run``: the commands a
client would send, through ``Core.execute``), never from the engine.  A page
function takes the session and the request's query and returns the HTML body;
what a user may do decides which forms are drawn (``Session.may``), and the
server's ACL decides again when a form is posted.

StreamDB's own commands do what Redis's cannot: ``time_lag_section`` (lag in
time and its chart, STREAMDB.GROUP INFO), ``dead_letter_section`` (the policy,
the dead-letter stream and replay: STREAMDB.GROUP GET/SET/RESET) and
``setid_command`` (reset to a time, earliest or latest with an exact
entries-read: STREAMDB.GROUP SETID; XGROUP SETID for an id).
"""

from __future__ import annotations

import datetime
import json
from html import escape
from urllib.parse import quote_from_bytes

from ...engine.groups import DEAD_LETTER_FIELDS, NotADeadLetter, split_dead_letter
from ...protocol.reply import CommandError
from .charts import line_chart

__all__ = ["layout", "login_page", "overview_page", "streams_page", "stream_page",
           "group_page", "group_action", "as_text", "url_value", "STREAMS_PAGE_SIZE"]

STREAMS_PAGE_SIZE = 50
ENTRIES_PAGE_SIZE = 20
DEAD_LETTERS_PAGE_SIZE = 20
# How often a replay looks again when a watched key changed under it (then it
# says so rather than loop while another client keeps writing).
REPLAY_ATTEMPTS = 5
MAX_ENTRIES_PAGE = 500
PENDING_SHOWN = 200
FORMATS = ("text", "json", "hex")
# What the group page offers to reset a group to: (value, label); "id" and "time"
# take the text typed next to the choice (setid_command).
SETID_TARGETS = (("$", "latest (only new entries)"), ("0", "earliest (the whole stream again)"),
                 ("id", "the id:"), ("time", "the time:"))

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f8fa}
header{background:#24292f;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:center}
header a{color:#fff;text-decoration:none;font-weight:600}header .who{margin-left:auto}
header form{display:inline}main{padding:16px;max-width:1200px}
table{border-collapse:collapse;background:#fff;margin:8px 0}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eaeef2}td.num{text-align:right;font-variant-numeric:tabular-nums}
pre{margin:0;white-space:pre-wrap;word-break:break-all;font-size:12px}
.msg{padding:8px;border:1px solid #54aeff;background:#ddf4ff;margin:8px 0}
.msg.error{border-color:#ff8182;background:#ffebe9}
.panel{background:#fff;border:1px solid #d0d7de;padding:8px 12px;margin:8px 0}
.chart text{font-size:11px;fill:#57606a}.chart .chart-title{fill:#1b1f24;font-weight:600}
.chart .axis{stroke:#8c959f}.chart .series{fill:none;stroke:#0969da;stroke-width:1.5}
tr.stuck td{background:#ffebe9}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(360px,1fr));gap:0 12px}
"""


def as_text(raw) -> str:
    """A key, field or value as text: UTF-8, other bytes as \\xNN (never lost)."""
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "backslashreplace")
    return str(raw)


def _h(raw) -> str:
    return escape(as_text(raw))


def url_value(raw: bytes | str) -> str:
    """A value for a URL's query string, percent-encoded byte by byte."""
    return quote_from_bytes(raw if isinstance(raw, bytes) else raw.encode(), safe="")


def _pairs(reply) -> dict:
    """A map reply (Map pairs, or RESP2's flat list) as a dict with text keys."""
    if reply and isinstance(reply[0], tuple):
        items = reply
    else:
        items = zip(reply[0::2], reply[1::2])
    return {as_text(k): v for k, v in items}


def _message(text: str, error: bool = False) -> str:
    return f'<div class="msg{" error" if error else ""}">{escape(text)}</div>' if text else ""


def _error_of(reply) -> str | None:
    return reply.message if isinstance(reply, CommandError) else None


def _csrf_field(session) -> str:
    return f'<input type="hidden" name="csrf" value="{escape(session.csrf)}">'


def layout(title: str, body: str, session=None, flash: str = "", flash_error: bool = False) -> bytes:
    nav = ""
    if session is not None:
        nav = (f'<a href="/">Overview</a><a href="/streams">Streams</a>'
               f'<span class="who">{escape(session.user)}</span>'
               f'<form method="post" action="/logout">{_csrf_field(session)}'
               f'<button type="submit" id="logout">Log out</button></form>')
    page = (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>{escape(title)} - StreamDB console</title><style>{_STYLE}</style></head>'
            f'<body><header><span>StreamDB</span>{nav}</header><main>'
            f'<h1>{escape(title)}</h1>{_message(flash, flash_error)}{body}</main></body></html>')
    return page.encode("utf-8")


def login_page(message: str = "") -> bytes:
    body = ('<form method="post" action="/login" class="panel" id="login-form">'
            '<p><label>User <input name="user" id="user" autocomplete="username" required></label></p>'
            '<p><label>Password <input name="password" id="password" type="password" '
            'autocomplete="current-password" required></label></p>'
            '<p><button type="submit" id="login">Log in</button></p>'
            '<p>The same users and passwords as AUTH; a user needs a password.</p></form>')
    return layout("Log in", body, None, message, bool(message))


def _table(headers: list[str], rows: list[list[str]], row_classes: list[str] | None = None,
           table_id: str = "") -> str:
    """A table of already rendered cells (``_td``); no header row when ``headers`` is empty."""
    head = "<tr>" + "".join(f"<th>{escape(h)}</th>" for h in headers) + "</tr>" if headers else ""
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if row_classes and row_classes[i] else ""
        body.append(f"<tr{cls}>" + "".join(row) + "</tr>")
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}>{head}{''.join(body)}</table>"


def _td(value, num: bool = False) -> str:
    return f'<td class="num">{_h(value)}</td>' if num else f"<td>{_h(value)}</td>"


def _info(text) -> dict[str, str]:
    """INFO's ``name:value`` lines as a dict."""
    out = {}
    for line in as_text(text).splitlines():
        name, sep, value = line.partition(":")
        if sep and not name.startswith("#"):
            out[name] = value
    return out


def _time_text(unix_seconds: str) -> str:
    try:
        return datetime.datetime.fromtimestamp(int(unix_seconds), datetime.timezone.utc) \
            .strftime("%Y-%m-%d %H:%M:%S UTC")
    except (ValueError, OverflowError):
        return unix_seconds


async def overview_page(session, sampler) -> bytes:
    reply = await session.run("INFO", "server", "memory", "persistence", "replication", "clients")
    if _error_of(reply):
        return layout("Overview", "", session, _error_of(reply), True)
    info = _info(reply)
    g = info.get
    server_rows = [["Role", g("role", "?")], ["Version", f"{g('redis_version', '?')} (StreamDB {g('streamdb_version', '?')})"],
                   ["Uptime", f"{g('uptime_in_seconds', '?')} s"], ["Connected clients", g("connected_clients", "?")]]
    if g("role") == "slave":
        server_rows.append(["Primary", f"{g('master_host')}:{g('master_port')} link {g('master_link_status')}"])
    replica_rows = [[_td(name), _td(value)] for name, value in info.items()
                    if name.startswith("slave") and name[5:].isdigit()]
    persistence_rows = [
        ["AOF", "on" if g("aof_enabled") == "1" else "off"],
        ["AOF fsync policy", g("aof_fsync_policy", "-")],
        ["AOF last write", g("aof_last_write_status", "-") + (f" ({g('aof_last_write_error')})" if g("aof_last_write_error") else "")],
        ["AOF size", f"{g('aof_current_size', '0')} bytes"],
        ["Last snapshot", _time_text(g("rdb_last_save_time", "0"))],
        ["Last snapshot status", g("rdb_last_bgsave_status", "-")],
        ["Changes since snapshot", g("rdb_changes_since_last_save", "-")],
        ["Backup", f"{g('backup_phase', '-')} (last: {g('backup_last_status', '-')})"],
    ]
    memory_rows = [
        ["Used memory", g("used_memory_human", "-")], ["Resident (RSS)", g("used_memory_rss_human", "-")],
        ["maxmemory", g("maxmemory_human", "-")],
        ["Stream cache size", f"{g('stream_cache_size', '0')} bytes"],
        ["Stream cache resident", f"{g('stream_cache_resident_bytes', '0')} bytes"],
        ["Stream cache hit rate", g("stream_cache_hit_rate", "-")],
    ]

    def kv(rows, ident):
        return _table([], [[_td(k), _td(v)] for k, v in rows], table_id=ident)

    replicas = (_table(["Replica", "State"], replica_rows, table_id="replicas") if replica_rows
                else "<p>No replica connected.</p>")
    body = (f'<div class="grid"><div class="panel"><h2>Server</h2>{kv(server_rows, "server")}'
            f'<h2>Replicas</h2>{replicas}</div>'
            f'<div class="panel"><h2>Persistence</h2>{kv(persistence_rows, "persistence")}</div>'
            f'<div class="panel"><h2>Memory</h2>{kv(memory_rows, "memory")}</div></div>'
            f'<div class="panel"><h2>Throughput, last hour</h2>'
            f'{_hour_chart(sampler.commands.values(), "Commands", "per second")}'
            f'{_hour_chart(sampler.input_bytes.values(), "Input", "bytes per second")}'
            f'</div>')
    return layout("Overview", body, session)


def _hour_chart(per_second: list[float], title: str, unit: str) -> str:
    """Per-second samples drawn as they are for the first ten minutes, then as
    per-minute means (the last, partial minute included): at most 60 points."""
    if len(per_second) <= 600:
        return line_chart(per_second, title, unit)
    means = [sum(per_second[i:i + 60]) / len(per_second[i:i + 60]) for i in range(0, len(per_second), 60)]
    return line_chart(means, title, f"{unit}, per-minute mean", 60)


async def streams_page(session, query: dict[str, bytes]) -> bytes:
    cursor = query.get("cursor", b"0")
    if not cursor.isdigit():
        cursor = b"0"
    reply = await session.run("SCAN", cursor, "COUNT", STREAMS_PAGE_SIZE, "TYPE", "stream")
    if _error_of(reply):
        return layout("Streams", "", session, _error_of(reply), True)
    next_cursor, keys = reply[0], sorted(reply[1])
    rows = []
    for key in keys:
        info = await session.run("XINFO", "STREAM", key)
        if _error_of(info):     # gone, or this user may not read it
            rows.append([f"<td>{_h(key)}</td>", f'<td colspan="9">{escape(_error_of(info))}</td>'])
            continue
        info = _pairs(info)
        retention = await session.run("STREAMDB.RETENTION", "GET", key)
        retention = {} if _error_of(retention) else _pairs(retention)
        lag, time_lag = await _worst_lag(session, key) if info.get("groups") else ("-", "-")
        rows.append([f'<td><a href="/stream?key={url_value(key)}">{_h(key)}</a></td>',
                     _td(info.get("length"), True),
                     _td(retention.get("bytes", "-"), True),
                     _td(_resident_share(retention), True),
                     _td(_retention_text(retention)),
                     _td(info.get("groups"), True),
                     _td(lag, True), _td(time_lag, True),
                     _td(info.get("last-generated-id")),
                     _td(info.get("entries-added"), True)])
    body = _table(["Stream", "Entries", "Bytes", "Resident", "Retention (trimmed)", "Groups",
                   "Worst lag (entries)", "Worst lag (time)", "Last id", "Entries added"],
                  rows, table_id="streams")
    if not keys:
        body += "<p>No stream on this page.</p>"
    if next_cursor != b"0":
        body += f'<p><a id="next-page" href="/streams?cursor={url_value(next_cursor)}">Next page</a></p>'
    return layout("Streams", body, session)


def _resident_share(retention: dict) -> str:
    """The part of the stream's bytes held in memory (the rest is cold, on disk)."""
    if "resident-bytes" not in retention:
        return "-"
    total = retention["bytes"]
    return f"{100 * retention['resident-bytes'] / total:.0f}%" if total else "100%"


def _retention_text(retention: dict) -> str:
    """STREAMDB.RETENTION GET's policy in force and what it trimmed since the start:
    "age 1 h, 1048576 bytes, acked (own; trimmed 120)"; "none" without limits."""
    if "max-age" not in retention:
        return "-"
    limits = []
    if retention["max-age"]:
        limits.append(f"age {duration_text(retention['max-age'])}")
    if retention["max-bytes"]:
        limits.append(f"{retention['max-bytes']} bytes")
    if limits and retention["acked"]:
        limits.append("acked")
    source = "own" if retention["own-settings"] else "default"
    return (", ".join(limits) or "none") + f" ({source}; trimmed {retention['trimmed-entries']})"


def duration_text(ms) -> str:
    """Milliseconds for a person: "350 ms", "42 s", "3 min 20 s", "2 h 5 min"."""
    if ms is None:
        return "?"
    ms = int(ms)
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms // 1000
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


async def _worst_lag(session, key: bytes) -> tuple[str, str]:
    """The largest lag of the stream's groups in entries ("?" when one is unknown)
    and in time (STREAMDB.GROUP INFO's lag-ms: always known)."""
    groups = await session.run("XINFO", "GROUPS", key)
    if _error_of(groups):
        return "-", "-"
    lags, time_lags = [], []
    for group in groups:
        info = await session.run("STREAMDB.GROUP", "INFO", key, _pairs(group)["name"])
        if _error_of(info):      # deleted since XINFO GROUPS
            continue
        info = _pairs(info)
        lags.append(info["lag"])
        time_lags.append(info["lag-ms"])
    lag = "?" if any(n is None for n in lags) else str(max(lags, default=0))
    return lag, duration_text(max(time_lags, default=0))


def _time_to_id(text: str) -> bytes | None:
    """An ISO-8601 time (2026-11-27T09:00:00Z; no zone = UTC) or unix ms as the
    first id at that millisecond; None when it is neither."""
    text = text.strip()
    if text.isdigit():
        return f"{text}-0".encode()
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return f"{int(when.timestamp() * 1000)}-0".encode()


def _show_value(raw: bytes, fmt: str) -> str:
    if fmt == "hex":
        return f"<pre>{raw.hex(' ')}</pre>"
    if fmt == "json":
        try:
            return f"<pre>{escape(json.dumps(json.loads(raw), indent=2, ensure_ascii=False))}</pre>"
        except (ValueError, UnicodeDecodeError):
            pass            # not JSON: shown as text
    return f"<pre>{_h(raw)}</pre>"


def _entry_time(entry_id: bytes) -> str:
    ms = entry_id.split(b"-", 1)[0]
    try:
        return datetime.datetime.fromtimestamp(int(ms) / 1000, datetime.timezone.utc) \
            .strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (ValueError, OverflowError):
        return ""


async def stream_page(session, query: dict[str, bytes]) -> bytes:
    key = query.get("key", b"")
    title = f"Stream {as_text(key)}"
    fmt = as_text(query.get("fmt", b"text"))
    fmt = fmt if fmt in FORMATS else "text"
    backwards = query.get("dir") == b"back"
    count = query.get("count", b"")
    count = min(int(count), MAX_ENTRIES_PAGE) if count.isdigit() and int(count) > 0 else ENTRIES_PAGE_SIZE
    error = ""
    start = query.get("start", b"")
    if query.get("time"):
        start = _time_to_id(as_text(query["time"])) or b""
        if not start:
            error = "The time is neither ISO-8601 (2026-11-27T09:00:00Z) nor unix milliseconds."
    if backwards:
        reply = await session.run("XREVRANGE", key, start or b"+", "-", "COUNT", count)
    else:
        reply = await session.run("XRANGE", key, start or b"-", "+", "COUNT", count)
    if _error_of(reply):
        return layout(title, _stream_form(key, fmt, count), session, _error_of(reply), True)
    rows = []
    for entry_id, fields in reply:
        cells = "".join(f"<tr><th>{_h(f)}</th><td>{_show_value(v, fmt)}</td></tr>"
                        for f, v in zip(fields[0::2], fields[1::2]))
        rows.append([f'<td class="entry-id">{_h(entry_id)}</td>', _td(_entry_time(entry_id)),
                     f"<td><table>{cells}</table></td>"])
    body = _stream_form(key, fmt, count) + _table(["Id", "Time (UTC)", "Fields"], rows, table_id="entries")
    if not rows:
        body += "<p>No entries here.</p>"
    body += _paging_links(key, fmt, count, reply, backwards)
    body += await _groups_of(session, key)
    return layout(title, body, session, error, bool(error))


def _stream_form(key: bytes, fmt: str, count: int) -> str:
    options = "".join(f'<option value="{f}"{" selected" if f == fmt else ""}>{f}</option>' for f in FORMATS)
    return (f'<form method="get" action="/stream" class="panel" id="browse">'
            f'<input type="hidden" name="key" value="{_h(key)}">'
            f'<label>From id <input name="start" size="24" placeholder="- (first)"></label> '
            f'<label>or from time <input name="time" size="24" placeholder="2026-11-27T09:00:00Z"></label> '
            f'<label>Direction <select name="dir"><option value="fwd">forwards</option>'
            f'<option value="back">backwards</option></select></label> '
            f'<label>Count <input name="count" size="4" value="{count}"></label> '
            f'<label>Show as <select name="fmt">{options}</select></label> '
            f'<button type="submit">Browse</button></form>')


def _paging_links(key: bytes, fmt: str, count: int, entries: list, backwards: bool) -> str:
    """Older / newer links from the page's first and last ids: exclusive ranges,
    so a page never repeats an entry and nothing is loaded beyond one page."""
    base = f"/stream?key={url_value(key)}&fmt={fmt}&count={count}"
    links = []
    if entries:
        first, last = entries[0][0], entries[-1][0]
        newest, oldest = (first, last) if backwards else (last, first)
        links.append(f'<a id="older" href="{base}&dir=back&start={url_value(b"(" + oldest)}">Older</a>')
        links.append(f'<a id="newer" href="{base}&dir=fwd&start={url_value(b"(" + newest)}">Newer</a>')
    links.append(f'<a href="{base}&dir=fwd">First page</a>')
    links.append(f'<a id="latest" href="{base}&dir=back">Latest page</a>')
    return "<p>" + " | ".join(links) + "</p>"


async def _groups_of(session, key: bytes) -> str:
    groups = await session.run("XINFO", "GROUPS", key)
    if _error_of(groups) or not groups:
        return ""
    rows = []
    for group in groups:
        g = _pairs(group)
        rows.append([f'<td><a href="/group?key={url_value(key)}&group={url_value(g["name"])}">{_h(g["name"])}</a></td>',
                     _td(g.get("consumers"), True), _td(g.get("pending"), True),
                     _td(g.get("last-delivered-id")), _td(g.get("entries-read"), True),
                     _td(g.get("lag"), True)])
    return "<h2>Groups</h2>" + _table(["Group", "Consumers", "Pending", "Last delivered id",
                                       "Entries read", "Lag (entries)"], rows, table_id="groups")


async def time_lag_section(session, key: bytes, group: bytes, lag_ring) -> str:
    """The group's lag in entries and in time (the age of the oldest entry it was not
    given, of its oldest pending one), its NACKed and dead-lettered counts
    (STREAMDB.GROUP INFO), and its time lag over the last hour (``lag_ring``, the
    console's sampler; None draws no chart)."""
    info = await session.run("STREAMDB.GROUP", "INFO", key, group)
    if _error_of(info):
        return _message(_error_of(info), True)
    info = _pairs(info)
    lag = info["lag"]
    table = _table(["Lag (entries)", "Lag (time)", "Oldest pending", "NACKed", "Dead-lettered"],
                   [[_td("?" if lag is None else lag, True), _td(duration_text(info["lag-ms"]), True),
                     _td(duration_text(info["oldest-pending-ms"]), True), _td(info["nacked"], True),
                     _td(info["dead-lettered"], True)]], table_id="time-lag")
    chart = ""
    if lag_ring is not None:
        chart = _hour_chart([ms / 1000 for ms in lag_ring.values()], "Time lag", "seconds")
    return f'<div class="panel"><h2>Lag</h2>{table}{chart}</div>'


async def dead_letter_section(session, key: bytes, group: bytes, query: dict[str, bytes]) -> str:
    """The group's dead-letter policy (STREAMDB.GROUP GET) with the forms to set and
    remove it, and its dead-letter stream's entries a page at a time (from the id
    in ``dlq_after``, exclusive) with replay of the selected ones."""
    policy = await session.run("STREAMDB.GROUP", "GET", key, group)
    if _error_of(policy):
        return _message(_error_of(policy), True)
    policy = _pairs(policy)
    dlq = policy["dead-letter-key"]
    action = _group_url(key, group)
    if dlq is None:
        body = f'<p id="dead-letter-policy">No dead-letter policy: entries are redelivered without limit. ' \
               f'{policy["dead-lettered"]} dead-lettered so far.</p>'
    else:
        body = (f'<p id="dead-letter-policy">An entry delivered {policy["max-deliveries"]} times goes to '
                f'<a href="/stream?key={url_value(dlq)}">{_h(dlq)}</a> instead of being delivered again; '
                f'{policy["dead-lettered"]} dead-lettered so far.</p>')
    if session.may("STREAMDB.GROUP", "SET", key, group, "MAXDELIVERIES", "1", "DEADLETTER", dlq or b"dlq"):
        body += (f'<form method="post" action="{action}" class="panel" id="policy-form">{_csrf_field(session)}'
                 f'<label>Dead-letter after <input name="max" id="policy-max" size="4" '
                 f'value="{policy["max-deliveries"] or ""}"> deliveries</label> '
                 f'<label>into the stream <input name="dlq" id="policy-dlq" size="24" '
                 f'value="{_h(dlq or b"")}"></label> '
                 f'<button type="submit" name="action" value="setpolicy" id="set-policy">Set</button> '
                 + ('<button type="submit" name="action" value="resetpolicy" id="reset-policy">'
                    'Remove the policy</button>' if dlq is not None else "")
                 + '</form>')
    if dlq is None:
        return f'<h2>Dead letters</h2>{body}'
    after = query.get("dlq_after", b"")
    entries = await session.run("XRANGE", dlq, b"(" + after if after else b"-", "+",
                                "COUNT", DEAD_LETTERS_PAGE_SIZE)
    if _error_of(entries):
        return f'<h2>Dead letters</h2>{body}{_message(_error_of(entries), True)}'
    may_replay = session.may("XDEL", dlq, "0-1")
    rows = []
    for entry_id, fields in entries:
        try:
            where, original = split_dead_letter(fields)
        except NotADeadLetter as e:
            where, original = {}, []
            shown = f"({e})"
        else:
            shown = " ".join(f"{as_text(f)}={as_text(v)}" for f, v in zip(original[0::2], original[1::2]))
        box = (f'<td><input type="checkbox" name="id" value="{_h(entry_id)}" form="dead-letter-form"></td>'
               if may_replay else "")
        rows.append(([box] if may_replay else []) + [_td(entry_id)] +
                    [_td(where.get(name, "-")) for name in DEAD_LETTER_FIELDS] + [_td(shown)])
    head = ([""] if may_replay else []) + ["Id", "Source", "Source id", "Group", "Last consumer",
                                          "Deliveries", "Fields"]
    body += _table(head, rows, table_id="dead-letters")
    if not rows:
        body += "<p>No dead letters here.</p>"
    if len(entries) == DEAD_LETTERS_PAGE_SIZE:
        body += (f'<p><a id="dead-letters-next" href="{action}&dlq_after={url_value(entries[-1][0])}">'
                 f'Next dead letters</a></p>')
    if may_replay and rows:
        body += (f'<form method="post" action="{action}" id="dead-letter-form" class="panel">{_csrf_field(session)}'
                 f'<input type="hidden" name="dlq" value="{_h(dlq)}">'
                 f'<button type="submit" name="action" value="replay" id="replay">Replay selected into their '
                 f'streams</button></form>')
    return f'<h2>Dead letters</h2>{body}'


def _group_url(key: bytes, group: bytes) -> str:
    return f"/group?key={url_value(key)}&group={url_value(group)}"


async def group_page(session, query: dict[str, bytes], lag_sampler=None) -> bytes:
    """The group's state and its actions; shows (once) the outcome of the last
    action posted (``session.flash``).  ``lag_sampler`` (the console's
    GroupLagSampler) follows the group's time lag from the first time it is shown."""
    (flash, flash_error), session.flash = session.flash, ("", False)
    key, group = query.get("key", b""), query.get("group", b"")
    title = f"Group {as_text(group)} of {as_text(key)}"
    groups = await session.run("XINFO", "GROUPS", key)
    if _error_of(groups):
        return layout(title, "", session, _error_of(groups), True)
    found = [_pairs(g) for g in groups if _pairs(g).get("name") == group]
    if not found:
        return layout(title, "", session, "No such group.", True)
    g = found[0]
    summary = _table(["Consumers", "Pending", "Last delivered id", "Entries read", "Lag (entries)"],
                     [[_td(g.get("consumers"), True), _td(g.get("pending"), True),
                       _td(g.get("last-delivered-id")), _td(g.get("entries-read"), True),
                       _td(g.get("lag"), True)]], table_id="group-summary")
    consumers = await session.run("XINFO", "CONSUMERS", key, group)
    pending = await session.run("XPENDING", key, group, "-", "+", PENDING_SHOWN)
    if _error_of(consumers) or _error_of(pending):
        return layout(title, summary, session, _error_of(consumers) or _error_of(pending), True)
    action = _group_url(key, group)
    may_delete = session.may("XGROUP", "DELCONSUMER", key, group, "c")
    consumer_rows = []
    for c in consumers:
        c = _pairs(c)
        row = [_td(c["name"]), _td(c.get("pending"), True), _td(c.get("idle"), True),
               _td(c.get("inactive"), True)]
        if may_delete:
            row.append(f'<td><form method="post" action="{action}">{_csrf_field(session)}'
                       f'<input type="hidden" name="action" value="delconsumer">'
                       f'<input type="hidden" name="consumer" value="{_h(c["name"])}">'
                       f'<button type="submit" class="delconsumer">Delete</button></form></td>')
        consumer_rows.append(row)
    consumer_head = ["Consumer", "Pending", "Idle (ms)", "Inactive (ms)"] + (["Action"] if may_delete else [])
    may_ack = session.may("XACK", key, group, "0-1")
    may_claim = session.may("XCLAIM", key, group, "c", "0", "0-1")
    may_nack = session.may("XNACK", key, group, "FAIL", "IDS", "1", "0-1")
    selectable = may_ack or may_claim or may_nack
    pending_rows, classes = [], []
    for entry_id, consumer, idle, deliveries in pending:
        box = (f'<td><input type="checkbox" name="id" value="{_h(entry_id)}" form="pending-form"></td>'
               if selectable else "")
        pending_rows.append(([box] if selectable else []) +
                            [_td(entry_id), _td(consumer), _td(idle, True), _td(deliveries, True)])
        classes.append("stuck" if deliveries > 1 else "")
    pending_head = ([""] if selectable else []) + ["Id", "Consumer", "Idle (ms)", "Deliveries"]
    ring = lag_sampler.watch(session.client.db, key, group) if lag_sampler is not None else None
    body = summary + await time_lag_section(session, key, group, ring)
    body += "<h2>Consumers</h2>" + _table(consumer_head, consumer_rows, table_id="consumers")
    body += f"<h2>Pending entries (first {PENDING_SHOWN})</h2>"
    body += _table(pending_head, pending_rows, classes, table_id="pending")
    if selectable:
        buttons = ""
        if may_ack:
            buttons += '<button type="submit" name="action" value="ack" id="ack">Acknowledge selected</button> '
        if may_nack:
            # FATAL dead-letters only under a policy (without one it just marks the
            # entries failed for good): offered when the group has one.
            buttons += '<button type="submit" name="action" value="nack" id="nack">NACK selected</button> '
            if await _has_policy(session, key, group):
                buttons += ('<button type="submit" name="action" value="deadletter" id="dead-letter">'
                            'Dead-letter selected</button> ')
        if may_claim:
            buttons += ('<label>Claim selected for consumer <input name="consumer" id="claim-consumer"></label> '
                        '<button type="submit" name="action" value="claim" id="claim">Claim</button>')
        body += f'<form method="post" action="{action}" id="pending-form" class="panel">{_csrf_field(session)}{buttons}</form>'
    if session.may("XGROUP", "SETID", key, group, "0"):
        options = "".join(f'<option value="{escape(v)}">{escape(label)}</option>' for v, label in SETID_TARGETS)
        body += (f'<form method="post" action="{action}" class="panel" id="setid-form">{_csrf_field(session)}'
                 f'<input type="hidden" name="action" value="setid">'
                 f'<label>Reset the group to <select name="target" id="setid-target">{options}'
                 f'</select></label> '
                 f'<input name="to" id="setid-to" size="24" placeholder="1700000000000-0 or 2026-11-27T09:00:00Z"> '
                 f'<button type="submit" id="setid">Reset</button></form>')
    body += await dead_letter_section(session, key, group, query)
    body += f'<p><a href="/stream?key={url_value(key)}">Back to the stream</a></p>'
    return layout(title, body, session, flash, flash_error)


async def _has_policy(session, key: bytes, group: bytes) -> bool:
    policy = await session.run("STREAMDB.GROUP", "GET", key, group)
    return not _error_of(policy) and _pairs(policy)["dead-letter-key"] is not None


def setid_command(key: bytes, group: bytes, choice: bytes, typed: bytes) -> list[bytes] | None:
    """The command that resets the group as chosen on the group page (None: the text
    typed is not what the choice needs).  Earliest, latest and a time go through
    STREAMDB.GROUP SETID, which sets entries-read exactly (the group's lag stays
    known; the group next reads the first entry at or after the time); an id
    through XGROUP SETID, which leaves entries-read unknown as in Redis."""
    if choice == b"$":
        return [b"STREAMDB.GROUP", b"SETID", key, group, b"LATEST"]
    if choice == b"0":
        return [b"STREAMDB.GROUP", b"SETID", key, group, b"EARLIEST"]
    if choice == b"id":
        return [b"XGROUP", b"SETID", key, group, typed] if typed else None
    if choice == b"time":
        first_id = _time_to_id(as_text(typed)) if typed else None
        if first_id is None:
            return None
        return [b"STREAMDB.GROUP", b"SETID", key, group, b"TIME", first_id.split(b"-", 1)[0]]
    return None


async def replay_dead_letter(session, dlq: bytes, entry_id: bytes) -> tuple[bool, str] | CommandError:
    """Append dead letter ``entry_id``'s original fields to its source stream and
    remove it from ``dlq``, both or neither, as the session's client: MULTI under
    WATCH of both keys, as ``streamdb-admin dead-letter replay`` does (a concurrent
    replay of the same entry makes this one find it gone; the source cannot turn
    into another type between the check and the XADD).  (replayed, what happened),
    or the error that refused it (NOPERM, ...)."""
    name = as_text(entry_id)
    for _ in range(REPLAY_ATTEMPTS):
        watched = await session.run("WATCH", dlq)
        found = watched if _error_of(watched) else await session.run("XRANGE", dlq, entry_id, entry_id)
        if _error_of(found) or not found:
            await session.run("UNWATCH")
            return found if _error_of(found) else (False, f"{name} not found")
        try:
            where, original = split_dead_letter(found[0][1])
        except NotADeadLetter as e:
            await session.run("UNWATCH")
            return False, f"{name} {e}"
        source = where[DEAD_LETTER_FIELDS[0]]
        await session.run("WATCH", source)
        if await session.run("TYPE", source) not in ("stream", "none"):
            await session.run("UNWATCH")
            return False, f"{name} not replayed: {as_text(source)} is no longer a stream"
        await session.run("MULTI")
        await session.run("XADD", source, "*", *original)
        await session.run("XDEL", dlq, entry_id)
        done = await session.run("EXEC")
        if isinstance(done, list):
            return done[0] if _error_of(done[0]) else (True, f"{name} -> {as_text(source)} {as_text(done[0])}")
        if _error_of(done):          # EXECABORT: a command was refused when queued
            return done
        # EXEC answered nil: a watched key changed meanwhile; look again.
    return False, f"{name} not replayed: the streams kept changing (try again)"


async def group_action(session, query: dict[str, bytes], form: dict[str, list[bytes]]) -> tuple[str, bool]:
    """Run the posted group action as the session's client; (message, is_error)."""
    key, group = query.get("key", b""), query.get("group", b"")
    action = form.get("action", [b""])[-1]
    ids = form.get("id", [])
    consumer = form.get("consumer", [b""])[-1]
    if action in (b"ack", b"nack", b"deadletter", b"replay") and not ids:
        return "Select the entries first.", True
    if action == b"ack":
        reply = await session.run("XACK", key, group, *ids)
        done = f"Acknowledged {reply} entries."
    elif action in (b"nack", b"deadletter"):
        mode = "FAIL" if action == b"nack" else "FATAL"
        reply = await session.run("XNACK", key, group, mode, "IDS", len(ids), *ids)
        done = (f"NACKed {reply} entries." if action == b"nack"
                else f"Dead-lettered {reply} entries.")
    elif action == b"claim":
        if not consumer:
            return "Select the entries and name the consumer to claim them for.", True
        reply = await session.run("XCLAIM", key, group, consumer, "0", *ids, "JUSTID")
        done = f"Claimed {len(reply) if isinstance(reply, list) else 0} entries for {as_text(consumer)}."
    elif action == b"setid":
        command = setid_command(key, group, form.get("target", [b""])[-1], form.get("to", [b""])[-1].strip())
        if command is None:
            return "Give an id, or a time as ISO-8601 or unix milliseconds.", True
        reply = await session.run(*command)
        after = await session.run("XINFO", "GROUPS", key)
        now = [_pairs(g) for g in after if _pairs(g).get("name") == group] if not _error_of(after) else []
        done = "The group was reset."
        if now:
            read = now[0]["entries-read"]
            done = (f"The group's last delivered id is now {as_text(now[0]['last-delivered-id'])}, "
                    f"entries read {'unknown' if read is None else read}.")
    elif action == b"setpolicy":
        most, dlq = form.get("max", [b""])[-1].strip(), form.get("dlq", [b""])[-1].strip()
        if not most.isdigit() or not dlq:
            return "Give the number of deliveries and the dead-letter stream's key.", True
        reply = await session.run("STREAMDB.GROUP", "SET", key, group, "MAXDELIVERIES", most, "DEADLETTER", dlq)
        done = f"Entries delivered {as_text(most)} times now go to {as_text(dlq)}."
    elif action == b"resetpolicy":
        reply = await session.run("STREAMDB.GROUP", "RESET", key, group)
        done = "The dead-letter policy is removed."
    elif action == b"replay":
        dlq = form.get("dlq", [b""])[-1]
        outcomes = [await replay_dead_letter(session, dlq, entry_id) for entry_id in ids]
        refused = [o for o in outcomes if isinstance(o, CommandError)]
        if refused:
            return refused[0].message, True
        return "Replay: " + "; ".join(text for _, text in outcomes), not all(ok for ok, _ in outcomes)
    elif action == b"delconsumer":
        reply = await session.run("XGROUP", "DELCONSUMER", key, group, consumer)
        done = f"Deleted consumer {as_text(consumer)} ({reply} pending entries dropped)."
    else:
        return "Unknown action.", True
    if isinstance(reply, CommandError):
        return reply.message, True
    return done, False
