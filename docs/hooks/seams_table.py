"""mkdocs hook: the table of upstream seams, made from ``numba_cache._compat`` at build time.

A page asks for it with the marker ``<!-- seams table -->``.
"""

from __future__ import annotations

_MARKER = "<!-- seams table -->"


def on_page_markdown(markdown: str, **kwargs) -> str:
    if _MARKER not in markdown:
        return markdown
    from numba_cache._compat import all_seams, installed_version

    lines = ["| upstream | seam | written for | installed here | used by |", "|---|---|---|---|---|"]
    for seam in all_seams(with_nutpie=True):
        lines.append(f"| {seam.upstream} | `{seam.name}` | {', '.join(seam.written_for)} | "
                     f"{installed_version(seam.upstream)} | `numba_cache/{seam.used_by}` |")
    return markdown.replace(_MARKER, "\n".join(lines))
