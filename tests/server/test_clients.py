"""Other Redis clients work unchanged: ioredis (Node.js) and redis-py's asyncio client.

The ioredis test runs only where `make test` could install it (Node.js present).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IOREDIS = ROOT / ".cache" / "node" / "node_modules" / "ioredis"

SCRIPT = r"""
const Redis = require(process.argv[2]);
(async () => {
  const r = new Redis({ port: Number(process.argv[3]), lazyConnect: false, enableReadyCheck: true });
  const out = {};
  await r.del("io:s");
  out.id = await r.xadd("io:s", "5-1", "temp", "19.8");
  await r.xgroup("CREATE", "io:s", "g", "0");
  out.read = await r.xreadgroup("GROUP", "g", "c1", "COUNT", 10, "STREAMS", "io:s", ">");
  out.ack = await r.xack("io:s", "g", "5-1");
  out.pending = await r.xpending("io:s", "g");
  out.info = (await r.info("server")).includes("redis_version");
  const sub = new Redis({ port: Number(process.argv[3]) });
  const blocked = sub.xread("BLOCK", 5000, "STREAMS", "io:s", "$");
  await new Promise((res) => setTimeout(res, 200));
  await r.xadd("io:s", "6-1", "temp", "20.1");
  out.blocked = await blocked;
  try { await r.xadd("io:s", "1-1", "x", "y"); } catch (e) { out.err = e.message; }
  console.log(JSON.stringify(out));
  r.disconnect(); sub.disconnect();
})().catch((e) => { console.error(e); process.exit(1); });
"""


@pytest.mark.skipif(not IOREDIS.exists() or not shutil.which("node"), reason="ioredis not installed")
def test_ioredis_streams_and_groups(server, tmp_path):
    script = tmp_path / "io.js"
    script.write_text(SCRIPT)
    out = subprocess.run(["node", str(script), str(IOREDIS), str(server.port)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["id"] == "5-1"
    assert got["read"] == [["io:s", [["5-1", ["temp", "19.8"]]]]]
    assert got["ack"] == 1
    assert got["pending"] == [0, None, None, None]
    assert got["info"] is True
    assert got["blocked"] == [["io:s", [["6-1", ["temp", "20.1"]]]]]
    assert got["err"].startswith("ERR The ID specified in XADD is equal or smaller")


def test_redis_py_asyncio_client(server):
    import redis.asyncio as aredis

    async def main():
        r = aredis.Redis(port=server.port)
        await r.delete("aio")
        waiter = asyncio.create_task(
            aredis.Redis(port=server.port).xread({"aio": "$"}, block=5000))
        await asyncio.sleep(0.1)
        await r.xadd("aio", {"a": "1"}, id="1-1")
        got = await waiter
        await r.aclose()
        return got

    assert asyncio.run(main()) == [[b"aio", [(b"1-1", {b"a": b"1"})]]]


def test_redis_py_resp3(server):
    import redis
    r = redis.Redis(port=server.port, protocol=3)
    r.delete("r3")
    r.xadd("r3", {"a": "1"}, id="1-1")
    assert r.xread({"r3": "0"}) == {b"r3": [[(b"1-1", {b"a": b"1"})]]}
    r.xgroup_create("r3", "g", id="0")
    info = r.xinfo_stream("r3")
    assert info["length"] == 1 and info["groups"] == 1
