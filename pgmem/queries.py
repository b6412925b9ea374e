"""Named SQL statements, read from ``queries.sql`` next to this file (procrastinate's layout)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_BLOCK = re.compile(r"^-- (?P<name>[a-z_]+) --$", re.MULTILINE)


@cache
def all_queries() -> dict[str, str]:
    text = resources.files("pgmem").joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _BLOCK.split(text)
    # parts: [preamble, name1, body1, name2, body2, ...]
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2])}


def query(name: str) -> str:
    """The statement called ``name``; KeyError when there is none."""
    return all_queries()[name]
