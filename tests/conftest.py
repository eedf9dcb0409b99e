"""Shared fixtures: every test gets its own store; compiled stores are shared per session."""

from __future__ import annotations

import pytest

from numba_cache import settings


@pytest.fixture(autouse=True)
def private_store(tmp_path, monkeypatch):
    """Point numba_cache (and subprocesses) at a store of this test's own."""
    root = tmp_path / "store"
    monkeypatch.setenv("NBCACHE_DIR", str(root))
    for variable in ("NBCACHE_DISABLE", "NBCACHE_READONLY", "NBCACHE_MAX_SIZE",
                     "NBCACHE_VERIFY_HITS", "NBCACHE_VERIFY_LIMIT"):
        monkeypatch.delenv(variable, raising=False)
    # A developer's shared cache must not take part in the tests (tests/test_remote.py sets its own).
    for variable in settings.ENVIRONMENT.values():
        if variable.startswith("NBCACHE_REMOTE"):
            monkeypatch.delenv(variable, raising=False)
    yield root
    settings.configure(**{name: None for name in settings.ENVIRONMENT})


def pytest_addoption(parser):
    group = parser.getgroup("numba_cache stress")
    group.addoption("--stress-processes", type=int, default=4,
                    help="worker processes of the stress test (default 4)")
    group.addoption("--stress-compiles", type=int, default=12,
                    help="compiles per worker process of the stress test (default 12)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "stress: many processes and injected faults against one store; run by default"
    )
