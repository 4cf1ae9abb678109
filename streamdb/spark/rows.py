"""Turning XRANGE pages into Arrow record batches of the source's schema.

The default schema is ``stream string, id string, ms long, seq long,
fields map<string,string>``.  A user schema (with ``fieldsAsColumns=true``) may
keep any of those columns and add typed columns picked out of the entry's
fields by name (string, binary, integral, floating point, boolean, decimal,
date, timestamp); a missing field is null.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
from itertools import accumulate, chain
from operator import itemgetter

from .common import Codec

DEFAULT_SCHEMA = "stream string, id string, ms long, seq long, fields map<string,string>"
META_COLUMNS = ("stream", "id", "ms", "seq", "fields")

_entry_id = itemgetter(0)
_entry_fields = itemgetter(1)


def _converter(type_name: str, codec: Codec):
    """bytes -> python value of a Spark type, by the type's simpleString."""
    t = type_name
    if t in ("string",):
        return codec.decode
    if t == "binary":
        return bytes
    if t in ("tinyint", "smallint", "int", "bigint"):
        return lambda b: int(b)
    if t in ("float", "double"):
        return lambda b: float(b)
    if t == "boolean":
        def _bool(b: bytes):
            s = b.strip().lower()
            if s in (b"1", b"true", b"t", b"yes"):
                return True
            if s in (b"0", b"false", b"f", b"no", b""):
                return False
            raise ValueError(f"not a boolean: {b!r}")
        return _bool
    if t.startswith("decimal"):
        return lambda b: _decimal.Decimal(b.decode("ascii"))
    if t == "date":
        return lambda b: _dt.date.fromisoformat(b.decode("ascii"))
    if t.startswith("timestamp"):
        def _ts(b: bytes):
            s = b.decode("ascii")
            if s.lstrip("-").isdigit():        # epoch milliseconds, as stream IDs are
                return _dt.datetime.fromtimestamp(int(s) / 1000, tz=_dt.timezone.utc)
            v = _dt.datetime.fromisoformat(s)
            return v if v.tzinfo else v.replace(tzinfo=_dt.timezone.utc)
        return _ts
    raise ValueError(f"fieldsAsColumns: unsupported column type {t}")


class RowBuilder:
    """Builds Arrow record batches for one output schema (a Spark StructType)."""

    def __init__(self, schema, codec: Codec, fields_as_columns: bool) -> None:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_type
        self.codec = codec
        self.names = [f.name for f in schema.fields]
        self.arrow_schema = pa.schema([pa.field(f.name, to_arrow_type(f.dataType), True)
                                       for f in schema.fields])
        self.plan = []
        for f in schema.fields:
            if f.name in META_COLUMNS:
                self.plan.append((f.name, None))
            elif fields_as_columns:
                fname = codec.encode(f.name)
                self.plan.append((fname, _converter(f.dataType.simpleString(), codec)))
            else:
                raise ValueError(f"column {f.name!r} is not one of {', '.join(META_COLUMNS)}; "
                                 f"set fieldsAsColumns=true to pick entry fields into columns")
        self.utf8 = codec.encoding.lower().replace("_", "-") in ("utf-8", "utf8")
        self.binary_map = any(f.name == "fields" and f.dataType.simpleString() == "map<string,binary>"
                              for f in schema.fields)

    def batch(self, stream: str, page: list):
        """One record batch from a raw XRANGE page ([[id, [f, v, ...]], ...]).

        No Python loop per entry for the meta columns and the fields map: the
        page is taken apart with map/itemgetter/chain (C loops), and ms/seq are
        cut out of the id column by Arrow kernels.
        """
        import pyarrow as pa
        import pyarrow.compute as pc
        n = len(page)
        cols = []
        ids = list(map(_entry_id, page))
        id_text = None
        id_parts = None
        for name, conv in self.plan:
            if conv is not None:
                vals = []
                for _, fv in page:
                    v = None
                    for i in range(0, len(fv), 2):
                        if fv[i] == name:
                            v = fv[i + 1]   # the last occurrence wins, as in a dict
                    vals.append(None if v is None else conv(v))
                cols.append(vals)
            elif name == "stream":
                cols.append(pa.repeat(pa.scalar(stream, pa.string()), n))
            elif name == "fields":
                cols.append(self._map(page))
            else:       # id, ms, seq: from the ids as one string array
                if id_text is None:
                    id_text = pa.array(ids, type=pa.binary()).cast(pa.string())
                if name == "id":
                    cols.append(id_text)
                    continue
                if id_parts is None:
                    id_parts = pc.split_pattern(id_text, "-")
                part = pc.list_element(id_parts, 0 if name == "ms" else 1)
                cols.append(part.cast(pa.int64()))
        arrays = [c if isinstance(c, pa.Array) else pa.array(c, type=f.type)
                  for c, f in zip(cols, self.arrow_schema)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)

    def _text(self, values: list):
        """A string array from bytes: UTF-8 is checked by Arrow in C, other codecs in Python."""
        import pyarrow as pa
        if self.utf8:
            try:
                return pa.array(values, type=pa.binary()).cast(pa.string())
            except pa.ArrowInvalid:
                for v in values:
                    self.codec.decode(v)      # raises the error that names the option
                raise
        return pa.array([self.codec.decode(v) for v in values], type=pa.string())

    def _map(self, page: list):
        """The fields map column, built from flat key/value arrays and offsets."""
        import pyarrow as pa
        import pyarrow.compute as pc
        fvs = list(map(_entry_fields, page))
        flat = list(chain.from_iterable(fvs))
        # Offsets count items (field and value), a pair is two: halved below.
        offsets = pa.array(list(accumulate(map(len, fvs), initial=0)), type=pa.int32())
        k = self._text(flat[0::2])
        v = pa.array(flat[1::2], type=pa.binary()) if self.binary_map else self._text(flat[1::2])
        return pa.MapArray.from_arrays(pc.divide(offsets, 2), k, v)
