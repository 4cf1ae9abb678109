"""The shell blocks of README.md and docs/*.md, and running them as written.

Every ```sh, ```bash or ```console block carries a marker on the line before its fence:

    <!-- guide-test: NAME -->      a test runs it (run_block); NAME is unique within its document
    <!-- not-tested: REASON -->    no test runs it, for the reason given

tests/ops/test_doc_blocks.py fails on an unmarked block and on a marked name no test claims.

The documents speak of the default ports (6379 for a server, 6380 for a replica, 6381 for a
server started on restored data, 9121 for metrics, 8080 for the console) and relative paths; a test runs a block in a scratch directory with those port
numbers rewritten to its servers' free ports, and with ``redis-cli`` and ``streamdb-admin``
defaulting to the first server's port (as they default to 6379), so every other word of
the block runs as a reader would type it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from helpers import ROOT

SHELL_FENCE = re.compile(r"^```(sh|bash|console)\n(.*?)^```", re.M | re.S)
MARKER = re.compile(r"<!-- (guide-test|not-tested): (.+?) -->\n\Z")
DOC_PORTS = (6379, 6380, 6381, 9121, 8080)
# Clients that default to port 6379 when no -p is given: later -p arguments win over the
# one these wrappers put first, as in redis-cli and streamdb-admin themselves.
DEFAULT_PORT_CLIENTS = ("redis-cli", "streamdb-admin")


@dataclass(frozen=True)
class Block:
    doc: str            # path relative to the project root
    line: int           # of the opening fence
    mark: str | None    # "guide-test", "not-tested" or None
    label: str          # the test name or the reason
    text: str


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def shell_blocks() -> list[Block]:
    blocks = []
    for path in documents():
        text = path.read_text()
        for m in SHELL_FENCE.finditer(text):
            before = text[:m.start()]
            marker = MARKER.search(before)
            blocks.append(Block(str(path.relative_to(ROOT)), before.count("\n") + 1,
                                marker.group(1) if marker else None,
                                marker.group(2).strip() if marker else "", m.group(2)))
    return blocks


def runnable_blocks(doc: str) -> dict[str, str]:
    return {b.label: b.text for b in shell_blocks() if b.doc == doc and b.mark == "guide-test"}


def block_env(tmp: Path, ports: dict[int, int] | None = None, **variables) -> dict[str, str]:
    """The environment a block runs in: the console scripts installed next to this
    interpreter (and redis-cli from the system) on PATH, the given variables set, and,
    when the documents' port 6379 is mapped, clients defaulting to its replacement."""
    env = dict(os.environ)
    path = [str(Path(sys.executable).parent), env.get("PATH", "")]
    if ports and 6379 in ports:
        shims = tmp / "doc-bin"
        shims.mkdir(exist_ok=True)
        for name in DEFAULT_PORT_CLIENTS:
            real = _which(name, os.pathsep.join(path))
            shim = shims / name
            shim.write_text(f'#!/bin/sh\nexec "{real}" -p {ports[6379]} "$@"\n')
            shim.chmod(0o755)
        path.insert(0, str(shims))
    env["PATH"] = os.pathsep.join(path)
    env.update({k: str(v) for k, v in variables.items()})
    return env


def _which(name: str, path: str) -> str:
    for d in path.split(os.pathsep):
        candidate = Path(d) / name
        if d and candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return name         # not installed: the block fails with the shell's own message


def rewrite_ports(text: str, ports: dict[int, int] | None) -> str:
    for doc_port, port in (ports or {}).items():
        assert doc_port in DOC_PORTS, doc_port
        text = re.sub(rf"(?<!\d){doc_port}(?!\d)", str(port), text)
    return text


def block_command(doc: str, name: str, ports: dict[int, int] | None = None) -> str:
    return rewrite_ports(runnable_blocks(doc)[name], ports)


def run_block(doc: str, name: str, cwd: Path, ports: dict[int, int] | None = None,
              timeout: float = 60, stdin: str | None = None, **variables) -> str:
    """Run block ``name`` of ``doc`` with bash -eu in ``cwd``; it must exit 0.  Returns its output."""
    proc = subprocess.run(["bash", "-eu", "-c", block_command(doc, name, ports)],
                          env=block_env(cwd, ports, **variables), input=stdin,
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert proc.returncode == 0, f"{doc} block {name!r} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def start_block(doc: str, name: str, cwd: Path, ports: dict[int, int] | None = None,
                **variables) -> subprocess.Popen:
    """Start a one-command block that runs a server (it keeps running): the caller stops it."""
    return subprocess.Popen(["bash", "-eu", "-c", "exec " + block_command(doc, name, ports)],
                            env=block_env(cwd, ports, **variables), cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
