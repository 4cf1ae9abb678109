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

from .common import Codec

DEFAULT_SCHEMA = "stream string, id string, ms long, seq long, fields map<string,string>"
META_COLUMNS = ("stream", "id", "ms", "seq", "fields")


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
        self.binary_map = any(f.name == "fields" and f.dataType.simpleString() == "map<string,binary>"
                              for f in schema.fields)

    def batch(self, stream: str, page: list):
        """One record batch from a raw XRANGE page ([[id, [f, v, ...]], ...])."""
        import pyarrow as pa
        dec = self.codec.decode
        cols = []
        ids = [e[0] for e in page]
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
                cols.append([stream] * len(page))
            elif name == "id":
                cols.append([i.decode("ascii") for i in ids])
            elif name == "ms":
                cols.append([int(i.partition(b"-")[0]) for i in ids])
            elif name == "seq":
                cols.append([int(i.partition(b"-")[2]) for i in ids])
            else:   # fields
                if self.binary_map:
                    cols.append([list(zip(map(dec, fv[0::2]), fv[1::2])) for _, fv in page])
                else:
                    cols.append([list(zip(map(dec, fv[0::2]), map(dec, fv[1::2]))) for _, fv in page])
        arrays = [pa.array(c, type=f.type) for c, f in zip(cols, self.arrow_schema)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)
