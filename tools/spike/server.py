"""Spike server: uvloop -> one of the spike cores -> the reply written at once.

    python tools/spike/server.py PORT MODULE_DIR MODULE [--effects] [--compiled-conn]

MODULE (core_pure_mode, core_pyx, core_mypyc) is imported from MODULE_DIR, where
bench_spike.py built it (or the plain file, for the interpreted twin).
"""
import asyncio
import gc
import sys
import time

import uvloop

port, module_dir, module = int(sys.argv[1]), sys.argv[2], sys.argv[3]
sys.path.insert(0, module_dir)
core_module = __import__(module)
core = core_module.Core("--effects" in sys.argv)


class Conn(asyncio.Protocol):
    """The connection in Python: what a plain asyncio server pays per read."""

    def connection_made(self, transport):
        self.transport = transport
        self.parser = core_module.Parser()

    def data_received(self, data):
        self.transport.write(core.run(self.parser, data, int(time.time() * 1000)))


async def main():
    loop = asyncio.get_running_loop()
    if "--compiled-conn" in sys.argv:
        factory = lambda: core_module.Conn(core)  # noqa: E731
    else:
        factory = Conn
    server = await loop.create_server(factory, "127.0.0.1", port)
    await server.serve_forever()

gc.freeze()
uvloop.run(main())
