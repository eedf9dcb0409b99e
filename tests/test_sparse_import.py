"""PyTensor's constant digging with its sparse import deferred (numba_cache/_compat/sparse_import.py).

The rewritten body is made from the installed PyTensor's source (a moved upstream fails
here), answers as upstream's does, and imports nothing sparse while ``pytensor.sparse``
is not imported; outside a rewrite of ours the function is upstream's.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import linecache
import marshal
import textwrap

import numpy as np
import pytensor.tensor as pt
import pytest
from helpers import run_python
from pytensor.tensor import basic
from pytensor.tensor.exceptions import NotScalarConstantError

from numba_cache._compat import sparse_import


def _sparse_names() -> list[tuple[str, str]]:
    """(module, name) of each name the installed function imports from ``pytensor.sparse``."""
    source = textwrap.dedent(inspect.getsource(basic._get_underlying_scalar_constant_value))
    return [(node.module, alias.name) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and node.module.startswith(sparse_import.SPARSE)
            for alias in node.names]


def test_the_installed_pytensor_has_its_sparse_import_deferred():
    """Fails when upstream moved: the import is gone (then this module has nothing left to
    do and should go), or a name it imports is read otherwise than as a class."""
    original = basic._get_underlying_scalar_constant_value.__code__
    assert _sparse_names(), "PyTensor's constant digging no longer imports pytensor.sparse"
    assert sparse_import.deferred_code(original) is not None


def test_each_deferred_name_is_a_class_of_pytensor_sparse():
    """No op can be an instance of it before ``pytensor.sparse`` is imported."""
    for module, name in _sparse_names():
        imported = getattr(importlib.import_module(module), name)
        assert inspect.isclass(imported)
        assert imported.__module__.startswith(sparse_import.SPARSE + "."), imported.__module__


def _answer(variable):
    try:
        return float(basic.get_underlying_scalar_constant_value(variable))
    except NotScalarConstantError:
        return "not a constant"


def _examples():
    import pytensor.sparse as sparse

    x = pt.dvector("x")
    zeros = sparse.CSM("csr")(pt.as_tensor(np.zeros(2)), pt.as_tensor(np.array([0, 1])),
                               pt.as_tensor(np.array([0, 1, 2])), pt.as_tensor(np.array([2, 2])))
    return [pt.constant(2.0) * 3.0, pt.second(x, 4.0), pt.constant(np.full((3,), 5.0))[1],
            pt.exp(x)[0], x.shape[0], pt.cast(pt.constant(1.5), "float32"), zeros]


def test_the_deferred_body_answers_as_upstream_and_is_upstream_outside_the_block():
    function = basic._get_underlying_scalar_constant_value
    original = function.__code__
    expected = [_answer(each) for each in _examples()]
    with sparse_import.deferred():
        assert function.__code__ is not original
        with sparse_import.deferred():  # nested blocks: one patch, removed at the last
            assert [_answer(each) for each in _examples()] == expected
        assert function.__code__ is not original
    assert function.__code__ is original
    assert expected[:3] == [6.0, 4.0, 5.0] and "not a constant" in expected


DIGGING = """
import json, sys
import pytensor.tensor as pt
from pytensor.tensor.basic import get_underlying_scalar_constant_value
from numba_cache._compat import sparse_import

imported = ["pytensor.sparse" in sys.modules]
with sparse_import.deferred():
    value = float(get_underlying_scalar_constant_value(pt.constant(2.0) * 3.0))
imported.append("pytensor.sparse" in sys.modules)
float(get_underlying_scalar_constant_value(pt.constant(2.0) * 3.0))
imported.append("pytensor.sparse" in sys.modules)
print(json.dumps({"value": value, "imported": imported}))
"""


def test_constant_digging_imports_nothing_sparse_while_deferred():
    """In a fresh process: not within the block; upstream's body, after it, imports it."""
    report = run_python(DIGGING)
    assert (report["value"], report["imported"]) == (6.0, [False, False, True])


def test_with_pytensor_sparse_imported_the_deferred_body_takes_the_sparse_branch():
    """PyTensor's branch for a ``CSM`` digs into the node's inputs, as a list (so it answers
    "not a constant" for every one): seen here by the recursive call it makes."""
    real = basic._get_underlying_scalar_constant_value
    csm = _examples()[-1]

    def digs(deferred: bool) -> list[str]:
        calls = []

        def counted(variable, *args, **kwargs):
            calls.append(type(variable).__name__)
            return real(variable, *args, **kwargs)

        with sparse_import.deferred() if deferred else contextlib.nullcontext():
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(basic, "_get_underlying_scalar_constant_value", counted)
                assert _answer(csm) == "not a constant"
        return calls

    assert digs(deferred=True) == digs(deferred=False) == ["SparseVariable", "list"]


def _asks_whether_an_instance(op):
    from pytensor.sparse import CSM
    return isinstance(op, CSM)


def _returns_the_class(op):
    from pytensor.sparse import CSM
    return CSM if op is None else isinstance(op, CSM)


def _binds_the_name_again(op):
    from pytensor.sparse import CSM
    CSM = type(op)  # noqa: N806
    return isinstance(op, CSM)


def test_an_import_is_deferred_only_where_each_name_is_read_as_a_class():
    assert sparse_import.deferred_code(_asks_whether_an_instance.__code__) is not None
    assert sparse_import.deferred_code(_returns_the_class.__code__) is None
    assert sparse_import.deferred_code(_binds_the_name_again.__code__) is None


def test_a_source_file_changed_since_its_import_is_left_to_import(tmp_path, monkeypatch):
    """The lines read must be those the interpreter ran: an edit after the import leaves
    upstream's code as it is."""
    module = tmp_path / "digging_module.py"
    module.write_text(textwrap.dedent(inspect.getsource(_asks_whether_an_instance)))
    monkeypatch.syspath_prepend(str(tmp_path))
    imported = importlib.import_module("digging_module")
    code = imported._asks_whether_an_instance.__code__
    assert sparse_import.deferred_code(code) is not None
    module.write_text(module.read_text().replace("return isinstance(op, CSM)",
                                                 "return isinstance(op, CSM) or op == 1"))
    linecache.checkcache(str(module))
    sparse_import.deferred_code.cache_clear()
    assert sparse_import.deferred_code(code) is None


def test_a_nested_block_makes_no_deferred_body_of_its_own(monkeypatch):
    """Only the first block makes the body (about 10 ms); a nested one finds it in place."""
    from numba_cache import session

    monkeypatch.setattr(session, "_session", session.Session())  # none made in it yet
    original = basic._get_underlying_scalar_constant_value.__code__
    sparse_import.deferred_code.cache_clear()
    with sparse_import.deferred():
        with sparse_import.deferred():
            pass
    assert sparse_import.deferred_code.cache_info().currsize == 1
    assert sparse_import.deferred_code(original) is not None


REMEMBERED = """
import json
from pytensor.tensor import basic
from numba_cache._compat import sparse_import
from numba_cache.kernels.context import current_context
from numba_cache.rewritten.rewrite_cache import _sparse_import_deferred

function = basic._get_underlying_scalar_constant_value
original = function.__code__
with _sparse_import_deferred(current_context()):
    inside = function.__code__
made = sparse_import.deferred_code.cache_info().misses
print(json.dumps({"made": made, "deferred": inside is not original,
                  "as_made_here": inside == sparse_import.deferred_code(original),
                  "key": sparse_import.derivation_key(original),
                  "fingerprint": current_context().fingerprint.digest}))
"""


def _derivation(root):
    """Run :data:`REMEMBERED` in a fresh process on the store at `root`."""
    return run_python(REMEMBERED, env={"NBCACHE_DIR": str(root)})


def test_the_body_made_in_one_process_is_loaded_by_the_next(tmp_path):
    """The first process makes it and keeps it in the store; the next loads it, the same
    code, and makes none; a damaged copy is made again and rewritten."""
    first = _derivation(tmp_path)
    assert (first["made"], first["deferred"], first["as_made_here"]) == (1, True, True)
    kept = tmp_path / first["fingerprint"] / "derived_code" / first["key"]
    assert kept.is_file()
    second = _derivation(tmp_path)
    assert (second["made"], second["deferred"], second["as_made_here"]) == (0, True, True)

    damaged = bytearray(kept.read_bytes())
    damaged[-1] ^= 0xFF
    kept.write_bytes(bytes(damaged))
    third = _derivation(tmp_path)
    assert (third["made"], third["deferred"], third["as_made_here"]) == (1, True, True)
    assert _derivation(tmp_path)["made"] == 0, "the damaged copy was not rewritten"


def test_a_remembered_body_of_another_function_is_not_used(tmp_path):
    """A readable body under the key whose code is not the function's (another signature,
    name or place) is made again, never run in its stead."""
    first = _derivation(tmp_path)
    from numba_cache.store import Store
    from store_states import settings_for

    other = sparse_import.deferred_code(_asks_whether_an_instance.__code__)
    Store(settings_for(tmp_path)).record_derived_code(
        first["fingerprint"], first["key"], sparse_import.DEFERRED + marshal.dumps(other))
    again = _derivation(tmp_path)
    assert (again["made"], again["deferred"], again["as_made_here"]) == (1, True, True)


def test_the_derivation_key_follows_the_source_lines_and_the_code(tmp_path, monkeypatch):
    """Everything the body is made from is in its key: an edited source (as the interpreter
    would read it now) and another function each give another key."""
    module = tmp_path / "keyed_module.py"
    module.write_text(textwrap.dedent(inspect.getsource(_asks_whether_an_instance)))
    monkeypatch.syspath_prepend(str(tmp_path))
    code = importlib.import_module("keyed_module")._asks_whether_an_instance.__code__
    key = sparse_import.derivation_key(code)
    assert key is not None and key == sparse_import.derivation_key(code)
    assert key != sparse_import.derivation_key(_asks_whether_an_instance.__code__)
    module.write_text(module.read_text().replace("isinstance(op, CSM)",
                                                 "isinstance(op, (CSM))"))
    linecache.checkcache(str(module))
    assert sparse_import.derivation_key(code) not in (None, key)


KEYED = """
import json
from pytensor.tensor import basic
from numba_cache._compat import sparse_import

import pytensor.tensor as pt

original = basic._get_underlying_scalar_constant_value.__code__
held = list(original.co_consts) * HOLD  # other reference counts: marshal would mark them
for _ in range(100 * HOLD):  # run often enough for the interpreter to specialise it
    basic.get_underlying_scalar_constant_value(pt.constant(2.0) * 3.0)
print(json.dumps({"key": sparse_import.derivation_key(original)}))
"""


def test_the_derivation_key_is_the_same_in_every_process():
    """Whatever else a process holds, however often it ran the function, and whatever its
    string hashing: else each program would make the body again, and keep a copy of its
    own."""
    keys = {run_python(KEYED.replace("HOLD", str(hold)),
                       env={"PYTHONHASHSEED": seed})["key"]
            for hold, seed in ((0, "1"), (1, "2"), (2, "random"))}
    assert len(keys) == 1 and None not in keys


def test_a_process_keys_and_reads_the_body_once(monkeypatch):
    """Only a process's first rewrite looks the body up: a later one (a test suite compiles
    thousands) costs nothing more than the swap."""
    from numba_cache import session

    monkeypatch.setattr(session, "_session", session.Session())
    place, asked = {}, []

    def known(key):
        asked.append(key)
        return place.get(key)

    for _ in range(3):
        with sparse_import.deferred(known=known, remember=place.__setitem__):
            assert basic._get_underlying_scalar_constant_value.__code__ is not None
    assert len(asked) == 1 and list(place) == asked
