"""Operator tools, each installed as a console script (pyproject.toml [project.scripts])."""
