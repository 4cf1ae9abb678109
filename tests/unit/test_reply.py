"""Reply encoding shortcuts against the general encoder."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamdb.protocol.reply import encode_bulks, encode_reply


@given(st.lists(st.binary(max_size=30), max_size=40))
def test_encode_bulks_is_each_reply_back_to_back(items):
    """A run's replies (bulk strings holding anything, '%' and CRLF included)."""
    expected = b"".join(encode_reply(x, False) for x in items)
    assert encode_bulks(items) == expected
    assert encode_bulks(items) == b"".join(encode_reply(x, True) for x in items)
