"""StreamDB: a durable Redis-protocol stream database."""

__version__ = "0.1.0"
