#!/usr/bin/env python3
"""Wrapper: the stream and consumer-group admin tool (streamdb-admin)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from streamdb.tools.admin import main  # noqa: E402

sys.exit(main())
