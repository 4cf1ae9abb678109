"""Operator tools (also installed as console scripts; thin wrappers live in tools/)."""
