"""mkdocs hook: the settings tables, made from ``numba_cache.settings.SETTINGS`` at build time.

A page asks for one with the marker ``<!-- settings table: GROUP -->`` (``store``
or ``remote``); a marker naming no group fails the build.
"""

from __future__ import annotations

import re

from numba_cache.settings import SETTINGS, markdown_table

_MARKER = re.compile(r"<!-- settings table: (\w+) -->")
_GROUPS = {setting.group for setting in SETTINGS}


def on_page_markdown(markdown: str, **kwargs) -> str:
    def table(match: re.Match) -> str:
        group = match.group(1)
        if group not in _GROUPS:
            raise ValueError(f"no settings of group {group!r}; groups: {sorted(_GROUPS)}")
        return markdown_table(group)

    return _MARKER.sub(table, markdown)
