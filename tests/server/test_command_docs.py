"""COMMAND DOCS describes every command of the table and every option of its grammar,
with Redis's texts and version fields: identical to redis-server 7.0 where 7.0 has the
command, plus the history lines and options of later releases (each named here)."""

from __future__ import annotations

import pytest

import streamdb.commands  # noqa: F401  (fills the command table)
from streamdb.commands import COMMANDS
from streamdb.commands.docs import DOCS, GrammarError, grammar_arguments

from resp_raw import RawClient, as_pairs, plain

# Options later Redis releases added to commands 7.0 has (StreamDB implements them).
LATER_OPTIONS = {
    "xadd": {"KEEPREF", "DELREF", "ACKED", "IDMPAUTO", "IDMP"},     # 8.2, 8.6
    "xtrim": {"KEEPREF", "DELREF", "ACKED"},                          # 8.2
    "xreadgroup": {"CLAIM", "MAXCOUNT", "MAXSIZE"},                   # 8.4, 8.10
    "xread": {"MAXCOUNT", "MAXSIZE"},                                 # 8.10
}
# Documented with tokens where Redis documents subcommands (COMMAND) or nothing (DEBUG).
OWN_GRAMMAR = {"command", "debug"}
# Grammar lines that are prose: these get no "arguments".
PROSE = {"sync"}


def _documented():
    for spec in COMMANDS.values():
        if spec.subcommands:
            yield spec, 1
            for sub in spec.subcommands.values():
                yield sub, 2
        else:
            yield spec, 1


def _tokens(args) -> set[str]:
    """Every token in a (tagged) COMMAND DOCS argument list, nested ones included."""
    out = set()
    for a in args:
        fields = dict(as_pairs(a))
        if b"token" in fields:
            out.add(plain(fields[b"token"]).decode().upper())
        if b"arguments" in fields:
            out |= _tokens(fields[b"arguments"][1])
    return out


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


@pytest.fixture
def docs_70(redis_server):
    c = RawClient(redis_server.port, resp3=True)
    try:
        reply = c.call("COMMAND", "DOCS")
    finally:
        c.close()
    out = {}
    for name, doc in as_pairs(reply):
        fields = dict(as_pairs(doc))
        out[name.decode()] = fields
        for sub, sdoc in as_pairs(fields.get(b"subcommands", (b"%", []))):
            out[sub.decode()] = dict(as_pairs(sdoc))
    return out


def test_every_command_and_subcommand_is_documented():
    for spec, words in _documented():
        doc = DOCS.get(spec.name)
        assert doc is not None and doc.summary and doc.group, spec.name
        if spec.subcommands or spec.name in PROSE:
            continue
        try:
            grammar_arguments(spec.grammar, words)
        except GrammarError as e:
            pytest.fail(f"{spec.name}: {spec.grammar!r}: {e}")


def test_docs_match_70_where_70_has_the_command(server, docs_70):
    ours_client = RawClient(server.port, resp3=True)
    try:
        for spec, _ in _documented():
            theirs = docs_70.get(spec.name)
            reply = ours_client.call("COMMAND", "DOCS", *spec.name.split("|")[:1])
            top = dict(as_pairs(as_pairs(reply)[0][1]))
            mine = top if "|" not in spec.name else dict(as_pairs(
                dict(as_pairs(top[b"subcommands"]))[spec.name.encode()]))
            if theirs is None:
                # newer than 7.0: its own since, after 7.0
                assert _version(plain(mine[b"since"]).decode()) > (7, 0, 99), spec.name
                continue
            for field in (b"summary", b"since", b"group", b"complexity", b"doc_flags",
                          b"deprecated_since", b"replaced_by"):
                assert (plain(mine[field]) if field in mine else None) == \
                       (plain(theirs[field]) if field in theirs else None), (spec.name, field)
            ours_history = [tuple(h) for h in plain(mine.get(b"history", (b"*", [])))]
            their_history = [tuple(h) for h in plain(theirs.get(b"history", (b"*", [])))]
            assert ours_history[:len(their_history)] == their_history, spec.name
            for version, _text in ours_history[len(their_history):]:
                assert _version(version.decode()) > (7, 0, 99), (spec.name, version)
            if spec.subcommands or spec.name in PROSE | OWN_GRAMMAR:
                continue
            mine_tokens = _tokens(mine.get(b"arguments", (b"*", []))[1])
            their_tokens = _tokens(theirs.get(b"arguments", (b"*", []))[1])
            assert mine_tokens - their_tokens == LATER_OPTIONS.get(spec.name, set()), spec.name
            if spec.group == "stream":      # every option Redis documents, we document
                assert their_tokens <= mine_tokens, spec.name
    finally:
        ours_client.close()


def test_arguments_of_a_command_read_from_its_grammar(server):
    c = RawClient(server.port, resp3=True)
    try:
        doc = dict(as_pairs(as_pairs(c.call("COMMAND", "DOCS", "xautoclaim"))[0][1]))
    finally:
        c.close()
    args = [{k: plain(v) for k, v in as_pairs(a)} for a in doc[b"arguments"][1]]
    assert args == [
        {b"name": b"key", b"type": b"key"}, {b"name": b"group", b"type": b"string"},
        {b"name": b"consumer", b"type": b"string"},
        {b"name": b"min-idle-time", b"type": b"integer"}, {b"name": b"start", b"type": b"string"},
        {b"name": b"count", b"type": b"integer", b"token": b"COUNT", b"flags": [b"optional"]},
        {b"name": b"justid", b"type": b"pure-token", b"token": b"JUSTID", b"flags": [b"optional"]}]


def test_info_and_docs_of_a_subcommand_by_its_full_name(server, redis_server):
    replies = []
    for port in (server.port, redis_server.port):
        c = RawClient(port)
        try:
            replies.append([c.call("COMMAND", "INFO", "xgroup|create", "xgroup|nosuch"),
                            plain(c.call("COMMAND", "DOCS", "xgroup|create"))])
        finally:
            c.close()
    ours, theirs = replies
    mine, ref = ours[0][1][0][1], theirs[0][1][0][1]
    assert mine[:2] + mine[3:6] == ref[:2] + ref[3:6]          # name, arity, key positions
    assert sorted(plain(mine[2])) == sorted(plain(ref[2]))     # flags (their order is Redis's)
    assert ours[0][1][1] == theirs[0][1][1] == (b"$", None)
    assert ours[1][0] == theirs[1][0] == b"xgroup|create"
    assert ours[1][1][:10] == theirs[1][1][:10]                # summary ... history


def replies_of(port: int, queries: list[tuple], resp3: bool = False) -> list:
    """The tagged replies of one connection to ``port`` to each query in turn."""
    c = RawClient(port, resp3=resp3)
    try:
        return [c.call(*query) for query in queries]
    finally:
        c.close()


SHARD_CHANNEL_QUERIES = [
    ("COMMAND", "INFO", "spublish", "ssubscribe", "sunsubscribe"),
    ("COMMAND", "DOCS", "spublish"), ("COMMAND", "DOCS", "ssubscribe"),
    ("COMMAND", "DOCS", "sunsubscribe"),
    ("COMMAND", "GETKEYS", "spublish", "ch", "msg"), ("COMMAND", "GETKEYS", "spublish", "ch"),
    ("COMMAND", "GETKEYS", "ssubscribe", "a", "b"), ("COMMAND", "GETKEYS", "sunsubscribe", "a"),
]


@pytest.mark.parametrize("resp3", [False, True])
def test_shard_channel_commands_describe_their_channels_as_redis_does(server, redis_server, resp3):
    """SPUBLISH SSUBSCRIBE SUNSUBSCRIBE: COMMAND INFO (flags in Redis's order, first/last/
    step and a key spec flagged not_key for the shard channel), COMMAND DOCS and COMMAND
    GETKEYS (no key: a not_key spec names none, whatever the arity) as redis-server 7.0
    answers them, wire types and order included."""
    ours, theirs = (replies_of(port, SHARD_CHANNEL_QUERIES, resp3)
                    for port in (server.port, redis_server.port))
    for query, mine, ref in zip(SHARD_CHANNEL_QUERIES, ours, theirs):
        assert mine == ref, query
    spublish = plain(ours[0])[0]
    assert spublish[3:6] == [1, 1, 1] and spublish[8][0][:2] == [b"flags", [b"not_key"]]


def test_getkeys_resolves_subcommands_as_redis_does(server, redis_server):
    """COMMAND GETKEYS of a command with subcommands reads the subcommand's keys; an
    unknown subcommand is an invalid command."""
    queries = [("COMMAND", "GETKEYS", "xgroup", "create", "k", "g", "$"),
               ("COMMAND", "GETKEYS", "xinfo", "stream", "k"),
               ("COMMAND", "GETKEYS", "xgroup", "nosuch", "k"),
               ("COMMAND", "GETKEYS", "config", "get", "x")]
    ours, theirs = (replies_of(port, queries) for port in (server.port, redis_server.port))
    assert ours == theirs
    assert plain(ours[0]) == [b"k"]
