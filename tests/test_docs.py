"""The documentation: the mkdocs site builds without a warning, and the README's links and
every module the README or the docs name exist."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import markdown

from numba_cache.settings import SETTINGS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PACKAGE = ROOT / "numba_cache"

FENCED_CODE = re.compile(r"^(`{3,}|~{3,}).*?^\1", re.DOTALL | re.MULTILINE)
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
HTML_LINK = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)=["']([^"']+)["']""")
MODULE_PATH = re.compile(r"\bnumba_cache/(?:\w+/)*\w+(?:\.py)?")
DOTTED_NAME = re.compile(r"\bnumba_cache(?:\.[A-Za-z_]\w*)+")


def documents() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_docs_build_strict(tmp_path):
    """mkdocs.yml is strict: a broken link or anchor, a page missing from the nav, or a
    benchmark report the results pages include that is missing fails the build."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site"),
         "--config-file", str(ROOT / "mkdocs.yml")],
        check=False, capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()
    # The settings tables are made from the settings' table, every setting on its page.
    pages = {"store": "settings", "remote": "remote"}
    for setting in SETTINGS:
        page = (tmp_path / "site" / pages[setting.group] / "index.html").read_text()
        assert f"<code>{setting.variable}=" in page, f"{setting.variable} missing from its page"


def links(text: str) -> list[str]:
    text = FENCED_CODE.sub("", text)
    return [*INLINE_LINK.findall(text), *REFERENCE_LINK.findall(text), *HTML_LINK.findall(text)]


def anchors(document: Path) -> set[str]:
    """The heading ids mkdocs gives `document` (the toc extension's slugs)."""
    converter = markdown.Markdown(extensions=["toc", "tables", "fenced_code"])
    converter.convert(document.read_text())
    found: set[str] = set()

    def walk(tokens):
        for token in tokens:
            found.add(token["id"])
            walk(token["children"])

    walk(converter.toc_tokens)
    return found


def test_readme_links_resolve():
    """README.md is not part of the mkdocs site, so its links are checked here: every
    relative link names a file or folder of the repository, and an anchor into a page of
    docs/ names one of its headings."""
    broken = []
    targets = links(README.read_text())
    assert targets, "no links found in README.md"
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL with a scheme, or an anchor in the README itself
        path_part, _, anchor = target.partition("#")
        path = (README.parent / path_part).resolve()
        if not path.exists():
            broken.append(f"{target}: no file {path_part}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: {path_part} has no heading with the anchor #{anchor}")
    assert not broken, "README.md links that lead nowhere:\n" + "\n".join(broken)


def defined_names(module: Path) -> set[str]:
    """Top-level names a module defines or imports, or loads on first use (the package's
    ``_LAZY_NAMES`` table, read by its module ``__getattr__``)."""
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            targets = {t.id for t in node.targets if isinstance(t, ast.Name)}
            names.update(targets)
            if "_LAZY_NAMES" in targets and isinstance(node.value, ast.Dict):
                names.update(key.value for key in node.value.keys if isinstance(key, ast.Constant))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return base if base.is_dir() else None  # a package without __init__ (namespace)


def dotted_name_problem(name: str) -> str | None:
    """Why `name` (``numba_cache.a.b``) does not exist, or None: the longest prefix that is a
    module must exist, and the next part, if any, must be a name that module defines."""
    parts = name.split(".")
    for length in range(len(parts), 0, -1):
        found = module_file(parts[:length])
        if found is not None:
            break
    if length == len(parts):
        return None
    attribute = parts[length]
    if found.is_dir() or attribute not in defined_names(found):
        return f"{'.'.join(parts[:length])} has no module or name {attribute!r}"
    return None


def test_named_modules_exist():
    """Every numba_cache/... path and numba_cache.xxx dotted name in the README and the docs
    exists in the tree (modules move; the docs must follow)."""
    missing = []
    checked = 0
    for document in documents():
        text = document.read_text()
        for path in sorted(set(MODULE_PATH.findall(text))):
            checked += 1
            if not (ROOT / path).exists():
                missing.append(f"{document.relative_to(ROOT)}: {path}")
        for name in sorted(set(DOTTED_NAME.findall(text))):
            checked += 1
            problem = dotted_name_problem(name)
            if problem:
                missing.append(f"{document.relative_to(ROOT)}: {name}: {problem}")
    assert checked, "no numba_cache module named in README.md or docs/: is the pattern wrong?"
    assert not missing, "modules named in the docs that do not exist:\n" + "\n".join(missing)

