"""A connection's request loop (server/pipeline.py) compiled behaves as its source.

Random pipelines of requests, valid and hostile (bad lengths, a bulk where a
count belongs, unbalanced quotes, cross protocol names), with commands that
change how the loop goes on (AUTH under requirepass, HELLO 3, QUIT, a killed
client, a command that blocks in the middle of the pipeline), are fed to a
compiled RequestLoop and to one run from its source (``compiled.load_source``),
each with its own Core, whole, in random pieces and a byte at a time.  Every
read must give the same action, the same reply bytes and the same query buffer,
and the counters must agree; the pieces a pipeline is cut into must not change
what it answers.  Under STREAMDB_PURE=1 both sides are the source.
"""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from streamdb import compiled
from streamdb.config import Config
from streamdb.protocol import RequestParser
from streamdb.protocol.reply import Raw
from streamdb.protocol.request import encode_request
from streamdb.server import pipeline
from streamdb.server.core import Core

from inproc import Delivered

SOURCE_PIPELINE = compiled.load_source("streamdb.server.pipeline")

PASSWORD = b"pw"

COMMANDS = [
    [b"PING"], [b"ECHO", b"x\r\ny"], [b"XADD", b"s", b"*", b"f", b"v"], [b"XLEN", b"s"],
    [b"SET", b"k", b"v"], [b"GET", b"k"], [b"MULTI"], [b"EXEC"], [b"DISCARD"],
    [b"AUTH", PASSWORD], [b"AUTH", b"wrong"], [b"HELLO", b"3"], [b"HELLO", b"2"],
    [b"XRANGE", b"s", b"-", b"+"], [b"NOSUCH", b"a"], [b"XADD", b"s"],
    # Ends the loop: blocks (until the test's XADD to s2), closes, is dropped.
    [b"XREAD", b"BLOCK", b"0", b"STREAMS", b"s2", b"$"], [b"QUIT"], [b"POST", b"/"],
    [b"CLIENT", b"KILL", b"ID", b"1", b"SKIPME", b"no"],
]
HOSTILE = [
    b"*abc\r\n", b"*1\r\n$-5\r\n", b"*2\r\n$4\r\nECHO\r\n+x\r\n", b"*1\r\n$3\r\nabcde\r\n",
    b'ECHO "unbalanced\r\n', b"*99999999999\r\n", b"\r\n", b"*0\r\n", b"PING\r\n",
    b"ECHO 'a b' \"\\x41\"\r\n",
]

frames = st.one_of(
    st.sampled_from(COMMANDS).map(lambda argv: encode_request(*argv)),
    st.sampled_from(HOSTILE),
)
pipelines = st.lists(frames, min_size=1, max_size=12).map(b"".join)


def _cuts(data: bytes, points: list[int]) -> list[bytes]:
    points = sorted({p % (len(data) + 1) for p in points} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:]) if b > a]


def _run(module, data_chunks: list[bytes], requirepass: bool) -> tuple:
    """Feed the chunks to a module's RequestLoop over a fresh Core; the trace."""
    config = Config()
    if requirepass:
        config.set("requirepass", PASSWORD.decode())
    core = Core(config, clock=lambda: 1_700_000_000.0)
    delivered = []
    client = core.new_client(outbox=Delivered(delivered.append))
    # What the network layer's close does (CLIENT KILL of the client itself).
    client.close = lambda: setattr(client, "close_after_reply", True)
    parser = RequestParser(config["proto-max-bulk-len"])
    out: list[bytes] = []
    loop = module.RequestLoop(core, client, parser, out)
    trace = []
    for chunk in data_chunks:
        action = loop.serve(chunk)
        trace.append((action, b"".join(out), client.query_buffer))
        out.clear()
        if action != module.READ_ON:
            break
    if client.blocked is not None:
        # Serve the blocked client from another one, then resume what waited.
        core.execute(core.new_client(), [b"XADD", b"s2", b"*", b"f", b"v"])
        action = loop.serve(None)
        trace.append((action, b"".join(out), client.query_buffer))
    stats = core.stats
    return trace, delivered, (stats.commands_processed, stats.error_replies,
                              stats.net_input_bytes, stats.reads_processed)


def _replies(trace) -> tuple:
    """What a client receives, whatever the reads: every reply byte and the end."""
    return b"".join(t[1] for t in trace), trace[-1][0]


@settings(max_examples=300, deadline=None)
@given(pipelines, st.lists(st.integers(0, 10_000), max_size=8), st.booleans())
def test_compiled_loop_matches_its_source(data, points, requirepass):
    chunks = _cuts(data, points)
    assert _run(pipeline, chunks, requirepass) == _run(SOURCE_PIPELINE, chunks, requirepass)


@settings(max_examples=150, deadline=None)
@given(pipelines, st.booleans())
def test_a_byte_at_a_time_matches_its_source_and_the_whole_read(data, requirepass):
    whole = _run(pipeline, [data], requirepass)
    trickle = _run(pipeline, [data[i:i + 1] for i in range(len(data))], requirepass)
    assert trickle == _run(SOURCE_PIPELINE, [data[i:i + 1] for i in range(len(data))],
                           requirepass)
    assert _replies(trickle[0]) == _replies(whole[0])
    assert trickle[1] == whole[1]       # what a blocked client was delivered


def test_a_blocked_command_in_the_middle_stops_the_pipeline_until_served():
    data = b"".join(encode_request(*a) for a in (
        [b"PING"], [b"XREAD", b"BLOCK", b"0", b"STREAMS", b"s2", b"$"], [b"ECHO", b"after"]))
    for module in (pipeline, SOURCE_PIPELINE):
        trace, delivered, _ = _run(module, [data], False)
        assert trace[0][:2] == (module.READ_ON, b"+PONG\r\n")
        assert trace[0][2] == len(encode_request(b"ECHO", b"after"))   # waiting in the parser
        assert len(delivered) == 1 and delivered[0] is not None
        assert trace[1] == (module.READ_ON, b"$5\r\nafter\r\n", 0)


def test_quit_a_protocol_error_and_a_killed_client_end_the_pipeline():
    for module in (pipeline, SOURCE_PIPELINE):
        quit_ = _run(module, [encode_request(b"QUIT") + encode_request(b"PING")], False)
        assert quit_[0] == [(module.CLOSE_AFTER_FLUSH, b"+OK\r\n", len(b"*1\r\n$4\r\nPING\r\n"))]
        bad = _run(module, [b"PING\r\n*abc\r\nPING\r\n"], False)
        assert bad[0][0][:2] == (module.CLOSE_AFTER_FLUSH,
                                 b"+PONG\r\n-ERR Protocol error: invalid multibulk length\r\n")
        killed = _run(module, [encode_request(b"CLIENT", b"KILL", b"ID", b"1", b"SKIPME", b"no") + b"PING\r\n"],
                      False)
        assert killed[0][0][:2] == (module.CLOSE_AFTER_FLUSH, b":1\r\n")
        dropped = _run(module, [b"PING\r\nPOST / HTTP/1.1\r\nPING\r\n"], False)
        assert dropped[0][0][0] == module.DROP_NOW


class _Socket:
    """What write_out needs of an asyncio transport: a socket that takes ``room``
    bytes and keeps the rest pending."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.written = b""

    def write(self, data) -> None:
        self.written += data

    def get_write_buffer_size(self) -> int:
        return max(0, len(self.written) - self.room)


def test_write_out_sends_one_write_of_every_reply_raw_ones_included():
    """A replica's stream is delivered as Raw (a bytes subclass), often alone in
    the list: the compiled write must take it as it is."""
    for module in (pipeline, SOURCE_PIPELINE):
        for replies, room in (([Raw(b"+x\r\n")], 100), ([b"+a\r\n", Raw(b"+b\r\n")], 100),
                              ([b"$3\r\nabc\r\n"], 2)):
            core = Core(Config())
            client = core.new_client()
            client.output_size = 7
            out = list(replies)
            loop = module.RequestLoop(core, client, RequestParser(), out)
            sock = _Socket(room)
            assert loop.write_out(sock) == (room < len(b"".join(replies)))
            assert sock.written == b"".join(replies) and out == []
            assert core.stats.writes_processed == 1
            assert core.stats.net_output_bytes == len(sock.written)
            assert client.output_size == (7 if room < len(sock.written) else 0)
