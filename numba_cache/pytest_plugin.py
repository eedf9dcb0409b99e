"""numba_cache for a test suite: ``pytest -p numba_cache.pytest_plugin``.

Opt-in: installing numba_cache registers no pytest plugin (no ``pytest11`` entry point,
so a suite that did not ask compiles as it always did). A run asks for it with
``-p numba_cache.pytest_plugin`` on the command line, in ``addopts`` or in
``PYTEST_ADDOPTS``, or with ``pytest_plugins = ["numba_cache.pytest_plugin"]`` in its
root conftest. Loaded, it:

- activates numba_cache (:func:`numba_cache.activate`) in the process running the tests,
  and in every pytest-xdist worker: xdist starts each worker with the controller's
  command line, so ``-p`` loads the plugin there too (the controller runs no test: it
  does not import PyTensor for nothing);
- keeps all of them on one store: the controller's settings reach the workers through
  the environment (``NBCACHE_DIR``...), and a store given by ``--numba-cache-dir`` or
  the ini option ``numba_cache_dir`` is handed to them in their ``workerinput``;
- ends the run with one line, the workers' figures summed (each sends its own in its
  ``workeroutput``): hits, misses, compiles and their time, uncacheable kernels, the
  store and its size; with ``--numba-cache-explain``, one line per miss saying why.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from numba_cache import settings
from numba_cache.cli.access import CliError, open_store
from numba_cache.kernels.outcomes.report import observe_lookups
from numba_cache.pytest_summary import Figures, explain_misses, stored_keys, summary_line

#: The key of the figures in a worker's ``workeroutput``, and of the store in its ``workerinput``.
_FIGURES = "numba_cache_figures"
_ROOT = "numba_cache_dir"
_PLUGIN_NAME = "numba_cache_session"


def pytest_addoption(parser):
    group = parser.getgroup("numba_cache",
                            "numba_cache (asked for with -p numba_cache.pytest_plugin)")
    group.addoption("--numba-cache-dir", metavar="DIR", default=None,
                    help="the store of this run (before NBCACHE_DIR and the ini option "
                         "numba_cache_dir)")
    group.addoption("--numba-cache-explain", action="store_true", default=False,
                    help="list the run's misses at its end, one line each, with why they missed")
    parser.addini("numba_cache_dir", "the store of test runs, relative to the ini file "
                  "(NBCACHE_DIR and --numba-cache-dir come first)", default="")


def pytest_configure(config):
    config.pluginmanager.register(_Session(config), _PLUGIN_NAME)


def pytest_unconfigure(config):
    session = config.pluginmanager.get_plugin(_PLUGIN_NAME)
    if session is not None:
        session.close()
        config.pluginmanager.unregister(session, _PLUGIN_NAME)


def store_asked(config) -> str | None:
    """The store this run was given by its command line or ini file (NBCACHE_DIR lies between
    them), or None: numba_cache's settings decide."""
    given = config.getoption("--numba-cache-dir")
    if given:
        return str(Path(given).expanduser().absolute())
    from_ini = config.getini("numba_cache_dir").strip()
    if from_ini and not os.environ.get("NBCACHE_DIR", "").strip():
        base = config.inipath.parent if config.inipath else config.rootpath
        return str((base / Path(from_ini).expanduser()).absolute())
    return None


class _Session:
    """The plugin in one process: the controller of an xdist run, a worker, or both at once
    (a run without xdist)."""

    def __init__(self, config):
        self.config = config
        self.worker_input = getattr(config, "workerinput", None)
        self.explain = config.getoption("--numba-cache-explain")
        worker = self.worker_input is not None
        root = self.worker_input.get(_ROOT) if worker else store_asked(config)
        self._configured_root = root is not None
        try:
            if root is not None:
                settings.configure(root=root)
            self.root = str(settings.current().root)  # every setting checked, once, here
        except settings.SettingsError as error:
            raise pytest.UsageError(f"numba_cache: {error}") from None
        self.figures = Figures()  # this process's; in the controller, the workers' added
        self.timer = None
        self._activated = False
        self._stored_before: set[str] = set()
        self._observed: list = []
        self._exit = contextlib.ExitStack()

    def runs_tests(self) -> bool:
        # xdist's controller registers its "dsession" plugin and leaves the tests to workers.
        return not self.config.pluginmanager.has_plugin("dsession")

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session):
        if not self.runs_tests():
            return
        # numba and PyTensor are imported here, in the processes that run tests only.
        import numba_cache
        from numba_cache.evaluation.compile_events import CompileTimer

        if not numba_cache.is_active():
            numba_cache.activate()
            self._activated = True
        numba_cache.reset_session_stats()
        self.timer = CompileTimer()
        self.timer.start()
        self._exit.callback(self.timer.stop)
        if self.explain:
            self._stored_before = stored_keys(_read_store())
            self._observed = self._exit.enter_context(observe_lookups())

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session):
        # Before xdist's worker sends its workeroutput (its wrapper around this hook).
        if self.timer is None:
            return
        import numba_cache

        self.figures.counters.update(numba_cache.session_stats())
        self.figures.compiles, self.figures.seconds = self.timer.compiles, self.timer.seconds
        self._exit.close()
        if self.explain:
            self.figures.misses = explain_misses(_read_store(), self._observed,
                                                 self._stored_before)
        if self.worker_input is not None:
            self.config.workeroutput[_FIGURES] = self.figures.to_dict()

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        # Workers read the same ini file, but the store resolved here is the run's one store.
        if self._configured_root:
            node.workerinput[_ROOT] = self.root

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        sent = getattr(node, "workeroutput", {}).get(_FIGURES)
        if sent is not None:
            self.figures.add(Figures(**sent))

    def pytest_terminal_summary(self, terminalreporter):
        store = _read_store()
        if self.explain:
            misses = sorted(self.figures.misses.values())
            terminalreporter.write_sep("-", f"numba_cache: {len(misses)} missed kernels")
            for line in misses:
                terminalreporter.write_line(line)
        terminalreporter.write_line(
            summary_line(self.figures, self.root, None if store is None else store.stats()))

    def close(self) -> None:
        """Leave the process as the plugin found it (a run inside another, as pytester's)."""
        self._exit.close()
        if self._activated:
            import numba_cache

            numba_cache.deactivate()
        if self._configured_root:
            settings.configure(root=None)


def _read_store():
    """The store, opened read-only (looking changes nothing); None if there is none yet."""
    try:
        return open_store()
    except CliError:
        return None
