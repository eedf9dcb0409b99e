"""The shell recipe of docs/ci.md, run as it stands: two CI jobs on fresh machines, the second
restoring the archive the first saved.

The block is read from the page, so the docs cannot drift from what is tested; only the
project's names are put in (``mypackage.models:graphs``: the graphs of tests/warm_targets.py)
and the CI system's cache is played by a directory the jobs copy the archive to and from.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TESTS, child_environment

# Fresh processes compiling real graphs: the slow tier, which CI runs (and --run-slow).
pytestmark = pytest.mark.slow

DOCS = TESTS.parent / "docs" / "ci.md"

#: The job's own test suite: the warmed graphs compiled through the cache, and how many
#: numba compiles that took, for the test to read.
SUITE = '''
import json
import warm_targets
import pytensor
from numba_cache.evaluation.compile_events import count_numba_compiles


def test_the_models():
    with count_numba_compiles() as compiled:
        for expression in warm_targets.EXPRESSIONS.values():
            function = pytensor.function(*warm_targets.build(expression), mode="NUMBA_CACHE")
            assert list(function(warm_targets.INPUT)) == warm_targets.expected(expression)
    with open("compiles.json", "w") as report:
        json.dump(compiled, report)
'''


def recipe() -> str:
    """The shell block under "Other CI systems" in docs/ci.md."""
    page = DOCS.read_text()
    section = page[page.index("## Other CI systems"):]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def job(workdir: Path, cache: Path, env: dict) -> dict:
    """One CI job: restore the archive from `cache`, run the recipe, save the archive."""
    workdir.mkdir()
    (workdir / "test_job.py").write_text(SUITE)
    for archive in cache.glob("*.tar.gz"):
        shutil.copy(archive, workdir)
    script = recipe().replace("mypackage.models:graphs", "warm_targets:graphs")
    bin_dir = str(Path(sys.executable).parent)
    environment = child_environment(env | {"PATH": bin_dir + os.pathsep + os.environ["PATH"]})
    ran = subprocess.run(["bash", "-c", script], cwd=workdir, env=environment,
                         capture_output=True, text=True, timeout=900, check=False)
    assert ran.returncode == 0, f"the recipe failed:\n{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}"
    saved = sorted(workdir.glob("numba-cache-*.tar.gz"))
    assert len(saved) == 1, saved
    shutil.copy(saved[0], cache)
    stats = subprocess.run([sys.executable, "-m", "numba_cache", "stats", "--json"],
                           env=environment, capture_output=True, text=True, check=True)
    return {"output": ran.stdout, "compiles": json.loads((workdir / "compiles.json").read_text()),
            "counters": json.loads(stats.stdout)["counters"]}


def test_the_shell_recipe_of_the_docs_serves_the_next_job(tmp_path):
    cache = tmp_path / "ci-cache"
    cache.mkdir()
    first = job(tmp_path / "job-1", cache, {"NBCACHE_DIR": str(tmp_path / "store-1")})
    assert first["counters"].get("graph.miss"), first["counters"]  # warm compiled them
    assert first["compiles"] == [], "the tests compiled what warm had compiled"
    second = job(tmp_path / "job-2", cache, {"NBCACHE_DIR": str(tmp_path / "store-2")})
    assert "imported" in second["output"], second["output"]
    assert not any(name.endswith(".miss") for name in second["counters"]), second["counters"]
    assert second["compiles"] == []
    # The plugin's summary line says so too.
    assert re.search(r"numba_cache: \d+ hits?, 0 misses, 0 compiles", second["output"]), \
        second["output"][-2000:]
