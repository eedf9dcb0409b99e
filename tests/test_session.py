"""Per-process state lives in the session (:mod:`numba_cache.session`), not in module globals.

A scan of every module of the package finds the module-level names bound to anything
but an immutable value or an alias, the ``global`` statements, and the functions
memoised with ``functools.cache``/``lru_cache``; each one found must be allowed below,
for the reason given.
"""

from __future__ import annotations

import ast
import json
import os
import warnings
from pathlib import Path

from test_architecture import module_names

import numba_cache
from numba_cache import session

#: Module-level state kept out of the session, by ``module.name``: why.
ALLOWED = {
    "numba_cache.session._session": "the session itself",
    "numba_cache.logs.logger": "logging's own logger of the package (logging keeps one per "
    "name), configured, not replaced",
    "numba_cache.kernels.outcomes.uncacheable._registry": "a registry filled by registration "
    "(register_uncacheable), as PyTensor registers its numba conversions",
    "numba_cache.kernels.callbacks.cfunc._recognizers": "a registry filled by registration "
    "(nutpie's recognizer registers itself on import)",
    "numba_cache.store.checkpoints._actions": "fault injection armed from the environment at "
    "import, read only",
    "numba_cache.store.remote.object_backend._typed_failures": "a decorator",
    "numba_cache.store.remote.redis_backend._typed_failures": "a decorator",
    # Memoisation of values that depend only on the arguments and the installed packages:
    "numba_cache.kernels.assembly.graph_body._unpacker": "the numba function unpacking a "
    "tuple of a length",
    "numba_cache.kernels.probes._symbol_call_probe": "the self-test's probe compiled once",
    "numba_cache.kernels.probes._op_kernel_probe": "the self-test's op kernel compiled once",
    "numba_cache.integration.nutpie._seams_hold": "nutpie's seams, checked once",
    "numba_cache.integration.nutpie._module_source_digest": "nutpie's version and source digest",
    "numba_cache.codegen.lifted_constants._one_element_tensors": "the same tensors for the "
    "same constant objects, so that nodes alike convert once",
    "numba_cache.codegen.lifted_constants._with_parameters": "the same Composite for the "
    "same composite and constant objects, so that nodes alike convert once",
    "numba_cache.keys.fingerprint._static_components": "the fingerprint's components of "
    "the installed packages and of the CPU target, which a process fixes once",
    "numba_cache.kernels.runtime.cython_addresses._module_alone": "an extension module "
    "loaded once (Cython keeps one per process)",
    "numba_cache.keys.foreign_code._foreign_classes": "which classes of a class's method "
    "resolution order are not PyTensor's, numpy's... (a class's bases never change)",
    "numba_cache._compat.sparse_import.deferred_code": "upstream's function compiled once "
    "with its sparse import deferred (a function of the installed code alone)",
}

#: Calls whose result is memoised by the decorated function.
MEMOISERS = {"cache", "lru_cache"}


def _immutable(value: ast.expr) -> bool:
    if isinstance(value, ast.Constant):
        return True
    if isinstance(value, ast.Tuple):
        return all(_immutable(element) for element in value.elts)
    if isinstance(value, ast.UnaryOp):
        return _immutable(value.operand)
    if isinstance(value, ast.BinOp):
        return _immutable(value.left) and _immutable(value.right)
    return False


def _name_of(expression: ast.expr) -> str:
    """``f`` of ``f``, ``functools.f``, ``f(...)``."""
    if isinstance(expression, ast.Call):
        expression = expression.func
    if isinstance(expression, ast.Attribute):
        return expression.attr
    return expression.id if isinstance(expression, ast.Name) else ""


def _is_main_block(statement: ast.stmt) -> bool:
    """``if __name__ == "__main__":``, whose names are a script's, not the module's state."""
    test = statement.test if isinstance(statement, ast.If) else None
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "__name__")


def _module_statements(body: list[ast.stmt]):
    """The statements run at the module's level (also inside its ``if`` and ``try`` blocks,
    but for a script's main block)."""
    for statement in body:
        if _is_main_block(statement):
            continue
        yield statement
        if isinstance(statement, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                yield from _module_statements(getattr(statement, block, []))
            for handler in getattr(statement, "handlers", []):
                yield from _module_statements(handler.body)


def module_state(source: str, module: str) -> set[str]:
    """``module.name`` of the state `source` (the module `module`) keeps at its level: names
    bound to a value that may change (not an immutable literal, not an alias of another
    name; UPPER_CASE names are constants), names a ``global`` statement rebinds, and
    functions memoised with ``functools.cache``/``lru_cache``."""
    tree = ast.parse(source)
    found = set()
    for statement in _module_statements(tree.body):
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            value = statement.value
            if _immutable(value) or isinstance(value, (ast.Name, ast.Attribute)):
                continue
            for target in targets:
                for name in ast.walk(target):
                    if (isinstance(name, ast.Name) and not name.id.startswith("__")
                            and not name.id.lstrip("_")[:1].isupper()):
                        found.add(f"{module}.{name.id}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found.update(f"{module}.{name}" for name in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(_name_of(decorator) in MEMOISERS for decorator in node.decorator_list):
                found.add(f"{module}.{node.name}")
    return found


def package_state() -> set[str]:
    return {found for name, path in module_names().items()
            for found in module_state(Path(path).read_text(), name)}


def test_the_scan_finds_state_kept_in_a_module():
    snippet = (
        "import functools\n"
        "LIMITS = {'a': 1}\n"  # a constant table
        "_original = dict.get\n"  # an alias
        "_seen = set()\n"
        "count = 0\n"
        "if __name__ == '__main__':\n"
        "    arguments = []\n"  # a script's
        "def note(value):\n"
        "    global count\n"
        "    count += 1\n"
        "    _seen.add(value)\n"
        "@functools.lru_cache(maxsize=4)\n"
        "def remembered(value):\n"
        "    return value\n"
    )
    assert module_state(snippet, "m") == {"m._seen", "m.count", "m.remembered"}


def test_per_process_state_is_in_the_session():
    found = package_state()
    assert sorted(found - set(ALLOWED)) == [], "keep it in numba_cache.session, or allow it here"
    assert sorted(set(ALLOWED) - found) == [], "allowed, yet gone: unlist it"


def test_the_session_is_one_per_process():
    assert session.current() is session.current()


def test_session_stats_read_and_reset_the_session_counters():
    from numba_cache.kernels.outcomes import report

    numba_cache.reset_session_stats()
    report.record_reuse("op")
    assert numba_cache.session_stats() == {"op.reused": 1}
    assert session.current().counters == {"op.reused": 1}
    numba_cache.session_stats()["op.reused"] += 5  # a copy
    assert numba_cache.session_stats() == {"op.reused": 1}
    numba_cache.reset_session_stats()
    assert numba_cache.session_stats() == {}


def test_a_forked_child_starts_from_its_parents_session():
    from numba_cache.kernels.outcomes import report

    numba_cache.reset_session_stats()
    report.record_reuse("graph")
    numba_cache.settings.configure(verify_hits=0.5)
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():  # a fork beside native threads (BLAS): none takes our locks
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: tell what it inherited, count one of its own, and leave
        try:
            report.record_reuse("graph")
            seen = {"stats": dict(numba_cache.session_stats()),
                    "verify_hits": numba_cache.settings.current().verify_hits}
            os.write(write_end, json.dumps(seen).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        seen = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert seen == {"stats": {"graph.reused": 2}, "verify_hits": 0.5}
    assert numba_cache.session_stats() == {"graph.reused": 1}  # the child's count is its own


def test_a_helper_counts_nothing_in_the_store():
    state = session.Session()
    state.become_helper(announce=7)
    assert (state.is_helper, state.counts_in_store, state.announce) == (True, False, 7)
    fresh = session.Session()
    assert (fresh.is_helper, fresh.counts_in_store, fresh.announce) == (False, True, None)


def test_recently_used_keeps_the_last_values_used():
    made = []

    def make(key):
        made.append(key)
        return key * 10

    kept = session.RecentlyUsed(2)
    assert [kept.get(key, lambda key=key: make(key)) for key in (1, 2, 1, 3, 1, 2)] == \
        [10, 20, 10, 30, 10, 20]
    assert made == [1, 2, 3, 2]  # 2 was the least recently used when 3 came
    assert len(kept) == 2
