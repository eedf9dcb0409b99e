"""Shared fixtures: every test gets its own store; compiled stores are shared per session."""

from __future__ import annotations

import os

import pytest

from numba_cache import settings


@pytest.fixture(scope="session")
def state_home(tmp_path_factory):
    """The session's user state directory (where the remembered fingerprints live)."""
    return tmp_path_factory.mktemp("state")


@pytest.fixture(autouse=True)
def private_store(tmp_path, monkeypatch, state_home):
    """Point numba_cache (and subprocesses) at a store of this test's own."""
    root = tmp_path / "store"
    monkeypatch.setenv("NBCACHE_DIR", str(root))
    monkeypatch.setenv("XDG_STATE_HOME", str(state_home))
    for variable in ("NBCACHE_DISABLE", "NBCACHE_READONLY", "NBCACHE_MAX_SIZE",
                     "NBCACHE_VERIFY_HITS", "NBCACHE_VERIFY_LIMIT", "NBCACHE_LINK_OPS",
                     "NBCACHE_LINK_BACKGROUND", "NBCACHE_COMPILE_AHEAD"):
        monkeypatch.delenv(variable, raising=False)
    # A developer's shared cache must not take part in the tests (tests/test_remote.py sets its own).
    for variable in settings.ENVIRONMENT.values():
        if variable.startswith("NBCACHE_REMOTE"):
            monkeypatch.delenv(variable, raising=False)
    yield root
    settings.configure(**{name: None for name in settings.ENVIRONMENT})


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true",
                     help="also run the tests marked slow (CI, with CI set, always does)")
    group = parser.getgroup("numba_cache stress")
    group.addoption("--stress-processes", type=int, default=4,
                    help="worker processes of the stress test (default 4)")
    group.addoption("--stress-compiles", type=int, default=12,
                    help="compiles per worker process of the stress test (default 12)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "stress: many processes and injected faults against one store; run by default"
    )


def pytest_collection_modifyitems(config, items):
    """Keep the default run short: tests marked slow run in CI, with --run-slow, or with -m."""
    if config.getoption("--run-slow") or os.environ.get("CI") or config.option.markexpr:
        return
    slow = [item for item in items if "slow" in item.keywords]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if "slow" not in item.keywords]
    config.stash[_SLOW_NOT_RUN] = len(slow)


_SLOW_NOT_RUN = pytest.StashKey[int]()


def pytest_terminal_summary(terminalreporter, config):
    not_run = config.stash.get(_SLOW_NOT_RUN, 0)
    if not_run:
        terminalreporter.write_line(
            f"{not_run} tests marked slow were not run: CI runs them (CI set); "
            "pass --run-slow to run them here."
        )
