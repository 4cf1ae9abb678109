"""The overview's throughput ring and the SVG chart helper."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from streamdb.server.console.charts import Ring, line_chart


def test_the_ring_keeps_the_last_values_in_order_and_never_grows():
    ring = Ring(5)
    assert ring.values() == []
    for v in range(1, 4):
        ring.append(v)
    assert ring.values() == [1, 2, 3]
    for v in range(4, 13):
        ring.append(v)
    assert ring.values() == [8, 9, 10, 11, 12]
    assert len(ring._values) == 5


def test_the_chart_is_well_formed_svg_with_one_point_per_value_and_escaped_text():
    svg = line_chart([0, 5, 10, 5], "a <b> & c", "ops")
    root = ET.fromstring(svg)                      # raises on malformed XML
    ns = "{http://www.w3.org/2000/svg}"
    points = root.find(f"{ns}polyline").get("points").split()
    assert len(points) == 4
    ys = [float(p.split(",")[1]) for p in points]
    assert ys[2] == min(ys) and ys[0] == max(ys)   # the top value is drawn highest
    assert "a <b> & c (ops)" in "".join(root.itertext())
    assert ET.fromstring(line_chart([], "empty", "ops")).find(f"{ns}polyline") is None
