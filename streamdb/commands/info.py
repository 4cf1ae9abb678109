"""XINFO."""
