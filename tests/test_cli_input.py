"""Bad input to ``numba-cache``: one clear line naming what was wrong, status 2, no traceback.

Run in this process through ``cli.main`` (tests/helpers.py ``cli_here``): nothing here
needs a fresh interpreter, so these are in the fast tier. tests/test_cli.py runs the
console script for real in fresh processes.
"""

from __future__ import annotations

import pytest
from helpers import cli_here, one_line_error


@pytest.mark.parametrize(
    ("arguments", "environment", "fragment"),
    [
        (["show", "abc123"], {}, "no entry with a key starting with abc123"),
        (["prune", "--max-size", "lots"], {}, "cannot read 'lots' as a size"),
        (["prune", "--older-than", "soon"], {}, "cannot read 'soon' as an age"),
        (["prune"], {}, "needs --max-size, --older-than or both"),
        (["list", "--sort", "colour"], {}, "invalid choice"),
        (["stats"], {"NBCACHE_MAX_SIZE": "lots"}, "NBCACHE_MAX_SIZE"),
        (["clear", "--yes"], {"NBCACHE_READONLY": "1"}, "NBCACHE_READONLY is set"),
        (["explain", "missing.py"], {}, "no such file"),
        (["list"], {"NBCACHE_DIR": "/nonexistent/numba_cache"}, "no store at /nonexistent"),
    ],
)
def test_bad_input_is_one_clear_line_and_no_traceback(private_store, arguments, environment, fragment):
    private_store.mkdir()
    one_line_error(cli_here(*arguments, env=environment), fragment)
