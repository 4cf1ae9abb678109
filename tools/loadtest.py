#!/usr/bin/env python3
"""Wrapper: the load test (1000 connections, blocked consumer groups) against Redis and StreamDB."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from streamdb.tools.loadtest import main  # noqa: E402

sys.exit(main())
