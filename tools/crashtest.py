#!/usr/bin/env python3
"""Wrapper: the kill -9 crash-test tool (streamdb-crashtest)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from streamdb.tools.crashtest import main  # noqa: E402

sys.exit(main())
