#!/usr/bin/env python3
"""Wrapper: the AOF checker/repairer (streamdb-check-aof)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from streamdb.tools.aofcheck import main  # noqa: E402

sys.exit(main())
