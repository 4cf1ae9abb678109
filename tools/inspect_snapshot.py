#!/usr/bin/env python3
"""Wrapper: the snapshot inspector (streamdb-snapshot)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from streamdb.tools.snapinspect import main  # noqa: E402

sys.exit(main())
