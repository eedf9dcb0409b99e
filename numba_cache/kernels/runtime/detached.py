"""PyTensor's object-mode blocks run without importing PyTensor's numba dispatch.

PyTensor's linear algebra and ``scipy.special`` kernels look their function pointers
up in object-mode blocks (:mod:`.objmode`). The machine code holds each block pickled:
its function by value, whose globals name PyTensor's lookups (``get_lapack_ptr`` of
``pytensor.link.numba.dispatch.linalg._LAPACK``...) by reference; and a stored block's
environment names its module. Unpickled, either imports that module and with it all of
``pytensor.link.numba.dispatch`` (its package imports every op's dispatch): about 0.2 s,
most of a warm start of a model holding a Cholesky factor.

So the process storing a kernel that holds such blocks stores with it the *namespace*
the blocks read from their modules (:func:`namespaces_of`): for each name their code
reads, the module's value; functions of the dispatch by value (their code as installed,
PyTensor's own, under the fingerprint's PyTensor version), anything else by reference.
A value goes in only if carrying it changes nothing: a function of the dispatch must
write no global and read only such values itself; no mutable container, no class or
other object of the dispatch; and the namespace, unpickled, must import no module of
the dispatch. numba's functions that PyTensor's lookups call go by value on the same
terms, where what they read is a container numba never writes
(:data:`numba_cache._compat.numba_internals.NEVER_WRITTEN`, checked by a seam): so
``get_blas_kind`` runs without importing ``numba.np.linalg`` (about 0.06 s, numba's array
implementation).

A process loading that kernel keeps its namespaces (:func:`remember`). While a block's
module is not imported, numba's unpickling in machine code (:func:`_unpickler`, put in
place of numba's ``serialize._numba_unpickle`` by :func:`install`) and a stored block's
environment (:func:`rebuild_environment`) take the names from them; a name they lack,
or a module imported meanwhile (by anything), is found as numba finds it. The code that
runs is the same either way; only the import is spared. So is ``scipy.linalg``'s: the
carried functions find LAPACK's addresses through :mod:`.cython_addresses`, which gives
numba's addresses without importing the package.
"""

from __future__ import annotations

import builtins
import dis
import io
import pickle
import sys
import types

import cloudpickle
import numba
from numba.extending import get_cython_function_address

from numba_cache import session
from numba_cache._compat import numba_internals
from numba_cache.kernels.runtime.cython_addresses import cython_function_address
from numba_cache.keys.foreign_code import names_read

#: The package whose modules' namespaces are carried: importing any of them imports it all.
DISPATCH = "pytensor.link.numba.dispatch"

_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), numba.types.Type)
_WRITES_GLOBALS = {"STORE_GLOBAL", "DELETE_GLOBAL"}


def install() -> None:
    """Unpickle machine code's constants with an :func:`_unpickler` from now on (idempotent).

    numba's ``_helperlib`` looks the unpickler up at the first unpickle of the process:
    a process that ran object-mode code before importing numba_cache keeps numba's.
    """
    numba_internals.replace_unpickle(_unpickler(numba_internals.unpickled_memo()))


def namespaces_of(blocks: list[str]) -> bytes | None:
    """The namespaces the blocks `blocks` (uuids) read from their modules of the dispatch,
    pickled; None if there is none to carry (no such block compiled in this process)."""
    namespaces: dict[str, dict] = {}
    for uuid in blocks:
        dispatcher = numba_internals.block_dispatcher(uuid)
        if dispatcher is None:
            continue
        function = numba_internals.block_function(dispatcher)
        module = sys.modules.get(function.__module__ or "")
        if module is None or not _in_dispatch(module.__name__):
            continue
        names = names_read(function.__code__) | numba_internals.ir_global_names(
            dispatcher.func_ir)
        namespace = namespaces.setdefault(module.__name__, {})
        for name in sorted(names):
            if name in vars(module) and _carriable(vars(module)[name], set()):
                namespace[name] = vars(module)[name]
    namespaces = {module: namespace for module, namespace in namespaces.items() if namespace}
    return _pickled(namespaces) if namespaces else None


def remember(blob: bytes) -> None:
    """Keep the namespaces a loaded kernel's entry carries (:func:`namespaces_of`), to be
    read when a block's module is needed and not imported."""
    session.current().detached_pending.append(blob)


def rebuild_environment(module: str, names: list[str], consts, env_name: str):
    """A stored block's environment (numba's ``_rebuild_env``), its globals those of
    `module`, or, while `module` is not imported, a namespace holding every name of
    `names` (those its code reads)."""
    namespace = None if module in sys.modules else _namespace(module)
    if namespace is not None and not set(names) <= namespace.keys():
        namespace = None
    if namespace is not None:
        namespace = {"__name__": module, "__builtins__": vars(builtins), **namespace}
    return numba_internals.rebuild_environment(module, consts, env_name, namespace)


def module_stand_in(module: str) -> types.ModuleType | None:
    """An empty module named `module`, outside ``sys.modules``, where a stored block's
    entry point needs the module only for its name and it is not imported but carried."""
    if module in sys.modules or not _in_dispatch(module) or _namespace(module) is None:
        return None
    return types.ModuleType(module)


def _unpickler(memo: dict):
    """numba's ``serialize._numba_unpickle`` over numba's `memo`, finding a name of a module
    of the dispatch not imported in the namespaces remembered.

    Machine code calls it each time it needs a pickled constant (boxing an array's
    dtype, on every call returning one): a hit in `memo` costs what numba's does.
    """

    def unpickle(address, bytedata: bytes, hashed: bytes):
        key = (address, hashed)
        try:
            return memo[key]
        except KeyError:
            obj = memo[key] = _load(bytedata)
            return obj

    return unpickle


def _load(bytedata: bytes):
    state = session.current()
    if state.detached_pending or state.detached_namespaces:
        return _DetachedUnpickler(io.BytesIO(bytedata)).load()
    return pickle.loads(bytedata)  # what numba's does (cloudpickle.loads)


class _DetachedUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if _in_dispatch(module) and module not in sys.modules:
            namespace = _namespace(module)
            if namespace is not None and name in namespace:
                return namespace[name]
        return super().find_class(module, name)


def _namespace(module: str) -> dict | None:
    """The namespace remembered for `module`, the pending blobs read first."""
    state = session.current()
    while state.detached_pending:
        for name, namespace in pickle.loads(state.detached_pending.pop()).items():
            _addresses_without_packages(namespace)
            kept = state.detached_namespaces.setdefault(name, {})
            for key, value in namespace.items():
                kept.setdefault(key, value)
    return state.detached_namespaces.get(module)


def _addresses_without_packages(namespace: dict) -> None:
    """Have `namespace` and the functions carried in it by value find Cython functions'
    addresses through :func:`~.cython_addresses.cython_function_address`: the same
    addresses, without importing ``scipy.linalg``.

    A function carried by reference (numba's ``get_cython_function_address`` itself, in
    a ``scipy.special`` kernel's namespace) has its module's globals: those are never
    changed, or numba's module would hand the replacement to every later caller, and
    the replacement's own module would have it call itself."""
    for scope in (namespace, *(value.__globals__ for value in namespace.values()
                               if isinstance(value, types.FunctionType))):
        if _globals_of_a_module(scope):
            continue
        for name, value in list(scope.items()):
            if value is get_cython_function_address:
                scope[name] = cython_function_address


def _globals_of_a_module(scope: dict) -> bool:
    """Whether `scope` is the namespace of an imported module (not a copy of one)."""
    module = sys.modules.get(scope.get("__name__"))
    return module is not None and getattr(module, "__dict__", None) is scope


def _pickled(namespaces: dict) -> bytes | None:
    """`namespaces` pickled with the functions of the dispatch and of
    :data:`~numba_cache._compat.numba_internals.NEVER_WRITTEN`'s modules by value; None if
    unpickling it would still import a module of the dispatch."""
    if DISPATCH not in sys.modules:
        return None
    by_value = [sys.modules[name] for name in (DISPATCH, *numba_internals.NEVER_WRITTEN)
                if name in sys.modules
                and name not in cloudpickle.list_registry_pickle_by_value()]
    for module in by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        blob = cloudpickle.dumps(namespaces, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        for module in by_value:
            cloudpickle.unregister_pickle_by_value(module)
    found = _ModulesFound(io.BytesIO(blob))
    found.load()
    return None if any(_in_dispatch(module) for module in found.modules) else blob


class _ModulesFound(pickle.Unpickler):
    """Unpickles, noting the module of every object found by reference."""

    def __init__(self, file):
        super().__init__(file)
        self.modules = set()

    def find_class(self, module, name):
        self.modules.add(module)
        return super().find_class(module, name)


def _carriable(value, seen: set) -> bool:
    """Whether `value`, read by a block from its module, is the same carried in a
    namespace: found by reference outside the modules carried by value, or a pure
    function of theirs."""
    if isinstance(value, types.ModuleType):
        return not _in_dispatch(value.__name__)
    if isinstance(value, type):
        return not _by_value(value.__module__)
    if isinstance(value, types.FunctionType):
        return not _by_value(value.__module__ or "") or _pure(value, seen)
    if isinstance(value, (tuple, frozenset)):
        return all(_carriable(member, seen) for member in value)
    if isinstance(value, types.BuiltinFunctionType):
        return True
    return isinstance(value, _IMMUTABLE)


def _pure(function: types.FunctionType, seen: set) -> bool:
    """Whether `function`, carried by value, computes what it computes in its module:
    it writes no global, and what it reads of its globals and closure is carriable."""
    if id(function) in seen:
        return True
    seen.add(id(function))
    code = function.__code__
    if any(instruction.opname in _WRITES_GLOBALS for instruction in _instructions(code)):
        return False
    cells = [cell.cell_contents for cell in function.__closure__ or ()]
    never_written = numba_internals.NEVER_WRITTEN.get(function.__module__, ())
    read = {name: function.__globals__[name] for name in sorted(names_read(code))
            if name in function.__globals__}
    return (all(_carriable(value, seen) for value in cells)
            and all(_carriable(value, seen)
                    or (name in never_written and _carriable_table(value, seen))
                    for name, value in read.items()))


def _carriable_table(value, seen: set) -> bool:
    """Whether `value`, a container its module never writes, is carried as it is: a dict
    of carriable keys and values."""
    return isinstance(value, dict) and all(
        _carriable(key, seen) and _carriable(item, seen) for key, item in value.items())


def _instructions(code: types.CodeType):
    yield from dis.get_instructions(code)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _instructions(constant)


def _in_dispatch(module: str) -> bool:
    return module == DISPATCH or module.startswith(DISPATCH + ".")


def _by_value(module: str) -> bool:
    """Whether the functions of `module` are carried by value (see :func:`_pickled`)."""
    return _in_dispatch(module) or module in numba_internals.NEVER_WRITTEN
