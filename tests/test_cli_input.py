"""Bad input to ``numba-cache``: one clear line naming what was wrong, status 2, no traceback;
and to ``settings.configure``: the error the same text in the environment gives.

Run in this process through ``cli.main`` (tests/helpers.py ``cli_here``): nothing here
needs a fresh interpreter, so these are in the fast tier. tests/test_cli.py runs the
console script for real in fresh processes.
"""

from __future__ import annotations

import re

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
        (["explain", "script.py:main"], {},
         "'script.py:main': give a file (script.py) or a module's callable (script:main)"),
        (["list"], {"NBCACHE_DIR": "/nonexistent/numba_cache"}, "no store at /nonexistent"),
        (["stats"], {"NBCACHE_LOCK_TIMEOUT": "nan"}, "must be a positive number of seconds"),
        (["stats"], {"NBCACHE_REMOTE_TIMEOUT": "inf"}, "must be a positive number of seconds"),
        (["publish"], {}, "no remote cache configured: set NBCACHE_REMOTE"),
        (["publish"], {"NBCACHE_REMOTE": "redis://127.0.0.1:9/0", "NBCACHE_REMOTE_READONLY": "1",
                       "NBCACHE_REMOTE_SECRET": "a-secret-of-enough-bytes"},
         "cannot change the remote cache redis://127.0.0.1:9/0: NBCACHE_REMOTE_READONLY is set"),
    ],
)
def test_bad_input_is_one_clear_line_and_no_traceback(private_store, arguments, environment, fragment):
    private_store.mkdir()
    one_line_error(cli_here(*arguments, env=environment), fragment)


def _file_at(base, *below):
    (base / "a-file").write_text("not a directory")
    return base.joinpath("a-file", *below)


def _link_to_nothing_at(base, *below):
    (base / "link").symlink_to(base / "gone")
    return base.joinpath("link", *below)


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (_file_at, "is not a directory"),
        (lambda base: _file_at(base, "store"), "is below {base}/a-file, which is not a directory"),
        (_link_to_nothing_at, "is a symbolic link to {base}/gone, which does not exist"),
        (lambda base: _link_to_nothing_at(base, "store"),
         "is below {base}/link, a symbolic link to {base}/gone, which does not exist"),
    ],
    ids=["a file", "below a file", "a link to nothing", "below a link to nothing"],
)
@pytest.mark.parametrize("command", [["stats"], ["clear", "--yes"], ["dir"]])
def test_a_store_path_that_cannot_be_a_directory_is_named_with_why(tmp_path, make, fragment,
                                                                    command):
    root = make(tmp_path)
    said = fragment.format(base=tmp_path)
    result = cli_here(*command, env={"NBCACHE_DIR": str(root)})
    if command == ["dir"]:  # says where the store is, and why it cannot be used
        assert result.returncode == 0
        assert result.stdout == f"{root}  (env NBCACHE_DIR, {said.removeprefix('is ')}: the cache cannot be used)\n"
    else:
        one_line_error(result, f"the store {root} (env NBCACHE_DIR) {said}: name a directory")


@pytest.mark.parametrize(
    ("setting", "value", "fragment"),
    [
        ("max_size", -5, "cannot read '-5' as a size"),
        ("lock_timeout", -1.0, "must be a positive number of seconds"),
        ("lock_timeout", float("nan"), "must be a positive number of seconds"),
        ("verify_hits", 5, "must be from 0 to 1"),
        ("verify_hits_limit", -2, "must not be negative"),
        ("remote_ttl", -3, "cannot read '-3' as a duration"),
        ("target", 3, "'3' is not a target"),
    ],
)
def test_configure_checks_values_given_in_python_as_the_environment_s(setting, value, fragment):
    from numba_cache import settings

    with pytest.raises(settings.SettingsError, match=re.escape(fragment)):
        settings.configure(**{setting: value})
    assert settings.current().sources[setting] != "python"


def test_configure_takes_python_values_of_the_setting_s_type():
    from numba_cache import settings

    try:
        made = settings.configure(max_size=1024, lock_timeout=2, verify_hits=True,
                                  compile_ahead=False, remote_ttl=60)
        assert (made.max_size, made.lock_timeout, made.verify_hits, made.compile_ahead,
                made.remote_ttl) == (1024, 2.0, 1.0, False, 60.0)
    finally:
        settings.configure(max_size=None, lock_timeout=None, verify_hits=None,
                           compile_ahead=None, remote_ttl=None)
