"""PyTensor's constant digging, without importing its sparse module, while a rewrite is ours.

``pytensor.tensor.basic._get_underlying_scalar_constant_value``, which many rewrites call,
begins with ``from pytensor.sparse import CSM``, only to ask ``isinstance(op, CSM)``.
The first call in a process therefore imports ``pytensor.sparse`` and ``scipy.sparse``
(about 0.07 s), in a compile whose graph holds nothing sparse. An op is an instance of a
class of ``pytensor.sparse`` only once that module is imported, so the import is needed
only then: :func:`deferred` gives the function, while a rewrite of ours runs
(:mod:`.counted_patch`), a body that imports the module only if it is in
``sys.modules`` already, and otherwise matches no class (``isinstance(op, ())`` is
False). Every other statement is upstream's own, compiled from its source.

The body is rewritten only where that is provably the same: each name imported from a
``pytensor.sparse`` module is read only as ``isinstance``'s class argument. Otherwise
(upstream moved), :func:`deferred_code` is None and upstream runs as it is, importing;
``tests/test_sparse_import.py`` fails on that, so we hear of it. Not a seam: where it
cannot defer, nothing is wrong, a compile only pays the import.

Making the body (parsing, checking and compiling upstream's source twice) takes about
11 ms, in every process whose compile rewrites. :func:`deferred` may be given a place to
remember it across processes (the store's derived code): under a key of everything the
body is made from (:func:`derivation_key`), a later process loads it with ``marshal``.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import linecache
import marshal
import sys
from collections.abc import Callable
from pathlib import Path
from types import CodeType

from numba_cache import session

#: The package whose import the function defers.
SPARSE = "pytensor.sparse"
#: What a remembered derivation holds: no body could be made, or the body's ``marshal``.
NOT_DEFERRED, DEFERRED = b"N", b"C"


def _function():
    from pytensor.tensor import basic

    return basic._get_underlying_scalar_constant_value


def deferred(known: Callable[[str], bytes | None] | None = None,
             remember: Callable[[str, bytes], None] | None = None):
    """The function's sparse import deferred meanwhile (a context manager); as upstream
    runs where it cannot be (:func:`deferred_code`).

    `known(key)` and `remember(key, body)`, if given, read and keep the derivation
    across processes, by :func:`derivation_key`."""
    function = _function()

    def install():  # at the first block only: a nested one would find the deferred code
        original = function.__code__
        bodies = session.current().sparse_import_bodies
        if original not in bodies:  # later compiles neither key nor read it again
            bodies[original] = _remembered_code(original, known, remember)
        if (code := bodies[original]) is not None:
            function.__code__ = code
        return original

    def remove(original) -> None:
        function.__code__ = original

    return session.current().sparse_import_patch.applied(install, remove)


def _remembered_code(original: CodeType, known, remember) -> CodeType | None:
    """:func:`deferred_code` of `original`, read from `known` if it holds the derivation,
    else made and given to `remember`."""
    key = derivation_key(original) if known is not None else None
    if key is None:
        return deferred_code(original)
    try:
        found = _decoded(known(key), original)
    except Exception:  # a place that cannot be read costs the derivation, nothing more
        found = None
    if found is not None:
        return found[0]
    code = deferred_code(original)
    if remember is not None:
        with contextlib.suppress(Exception):
            remember(key, NOT_DEFERRED if code is None else DEFERRED + marshal.dumps(code))
    return code


def _decoded(body: bytes | None, original: CodeType) -> tuple[CodeType | None] | None:
    """The derivation `body` holds, as a 1-tuple, or None if it holds none that can stand
    for `original`'s (unreadable, or a code of another signature or place)."""
    if body == NOT_DEFERRED:
        return (None,)
    if body is None or not body.startswith(DEFERRED):
        return None
    try:
        code = marshal.loads(body[len(DEFERRED):])
    except (EOFError, ValueError, TypeError):
        return None
    if not isinstance(code, CodeType) or _signature(code) != _signature(original):
        return None
    return (code,)


def _signature(code: CodeType) -> tuple:
    return (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
            code.co_freevars, code.co_qualname, code.co_filename, code.co_firstlineno)


def derivation_key(original: CodeType) -> str | None:
    """A sha256 hex digest of everything :func:`deferred_code` makes its body from: the
    interpreter, `original` itself (its bytecode, constants, names and positions), the
    source lines it spans as :mod:`linecache` has them, and this module's own source;
    None if one of them cannot be read."""
    span = _source_span(original)
    try:
        own_source = Path(__file__).read_bytes()
    except OSError:
        return None
    if span is None:
        return None
    digest = hashlib.sha256()
    for part in (sys.version.encode(), own_source, _identity(original).encode(),
                 span[1].encode()):
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


#: The fields of a code object that :func:`_identity` describes, its constants apart.
_CODE_FIELDS = ("co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_flags",
                "co_code", "co_names", "co_varnames", "co_freevars", "co_cellvars",
                "co_filename", "co_name", "co_qualname", "co_firstlineno", "co_linetable",
                "co_exceptiontable")


def _identity(value) -> str:
    """A text of `value`, a code object or one of its constants, that is the same in every
    process for the same code (``marshal.dumps`` is not: it marks objects by their
    reference counts; a frozenset's order follows string hashing)."""
    if isinstance(value, CodeType):
        fields = ", ".join(repr(getattr(value, name)) for name in _CODE_FIELDS)
        return f"code({fields}, consts=[{', '.join(map(_identity, value.co_consts))}])"
    if isinstance(value, tuple):
        return f"({', '.join(map(_identity, value))},)"
    if isinstance(value, frozenset):
        return f"frozenset({sorted(map(_identity, value))})"
    return f"{type(value).__name__}:{value!r}"


@functools.cache
def deferred_code(original: CodeType) -> CodeType | None:
    """The code of `original`'s function with each sparse import deferred, or None where
    that cannot be shown to change nothing."""
    definition = _definition(original)
    if definition is None:
        return None
    imports, safe = _sparse_imports(definition)
    if not imports or not safe:
        return None
    _Deferring(imports).visit(definition)
    return _compiled(definition, original)


def _definition(original: CodeType) -> ast.FunctionDef | None:
    """The syntax tree of `original`'s function, from its source file as the interpreter
    ran it, or None.

    Its lines are those `original` spans (:func:`inspect.getsource` would find them too,
    but first maps every module's file: about 50 ms), after as many empty lines as come
    before them, so that the tree's line numbers are the file's."""
    span = _source_span(original)
    if span is None:
        return None
    first, source = span
    try:
        tree = ast.parse("\n" * (first - 1) + source)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        return None
    if not _alike(_compiled(tree.body[0], original), original):
        return None  # the file changed since it was imported
    return tree.body[0]


def _source_span(original: CodeType) -> tuple[int, str] | None:
    """The first line number and the source lines of `original`'s function, or None."""
    lines = linecache.getlines(original.co_filename)
    first = original.co_firstlineno
    last = max((end for code in _codes(original) for _, end, _, _ in code.co_positions()
                if end is not None), default=0)
    if not lines or last < first or lines[first - 1][:1].isspace():
        return None  # a nested function's source would need dedenting: not this one's
    return first, "".join(lines[first - 1:last])


def _codes(code: CodeType):
    yield code
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            yield from _codes(constant)


def _compiled(definition: ast.FunctionDef, original: CodeType) -> CodeType | None:
    """The code of `definition` (left as it is), named as `original`, if its signature is
    the same."""
    module = ast.fix_missing_locations(ast.Module(body=[definition], type_ignores=[]))
    compiled = compile(module, original.co_filename, "exec", dont_inherit=True)
    [code] = [each for each in compiled.co_consts if isinstance(each, CodeType)]
    if (code.co_argcount, code.co_kwonlyargcount, code.co_freevars) != (
            original.co_argcount, original.co_kwonlyargcount, original.co_freevars):
        return None
    return code.replace(co_qualname=original.co_qualname)


def _alike(compiled: CodeType | None, original: CodeType) -> bool:
    """Whether `compiled` is `original` as far as an edit of its source would show: the same
    names, variables, constants and length of bytecode, nested code alike too. (Not the
    same bytes: a module compiled whole may pick other variants of an instruction.)"""
    if compiled is None:
        return False
    nested = [each for each in compiled.co_consts if isinstance(each, CodeType)]
    nested_there = [each for each in original.co_consts if isinstance(each, CodeType)]
    return ((compiled.co_names, compiled.co_varnames, len(compiled.co_code))
            == (original.co_names, original.co_varnames, len(original.co_code))
            and [each for each in compiled.co_consts if not isinstance(each, CodeType)]
            == [each for each in original.co_consts if not isinstance(each, CodeType)]
            and len(nested) == len(nested_there)
            and all(_alike(a, b) for a, b in zip(nested, nested_there, strict=True)))


def _sparse_imports(definition: ast.FunctionDef) -> tuple[list[ast.ImportFrom], bool]:
    """The function's imports from :data:`SPARSE`, and whether deferring them is safe: each
    name they import is bound nowhere else in the function and read only as the class
    argument of ``isinstance(value, name)``, the builtin (not rebound either)."""
    nodes = list(ast.walk(definition))
    imports = [node for node in nodes if isinstance(node, ast.ImportFrom) and not node.level
               and (node.module or "").split(".")[:2] == SPARSE.split(".")]
    names = {alias.asname or alias.name for node in imports for alias in node.names}
    if "*" in names:
        return imports, False
    guarded = names | {"isinstance"}
    as_class = {id(node.args[1]) for node in nodes
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance" and len(node.args) == 2 and not node.keywords}
    for node in nodes:
        if isinstance(node, ast.Name) and node.id in guarded and (
                not isinstance(node.ctx, ast.Load)
                or (node.id in names and id(node) not in as_class)):
            return imports, False
        if isinstance(node, ast.Import | ast.ImportFrom) and node not in imports and any(
                (alias.asname or alias.name) in guarded for alias in node.names):
            return imports, False
        if isinstance(node, ast.arg) and node.arg in guarded:
            return imports, False
        if isinstance(node, ast.Global | ast.Nonlocal) and guarded & set(node.names):
            return imports, False
    return imports, True


class _Deferring(ast.NodeTransformer):
    """Each import of `imports` becomes: the import if :data:`SPARSE` is imported already,
    else each name bound to ``()``, of which no value is an instance."""

    def __init__(self, imports: list[ast.ImportFrom]):
        self._imports = {id(node) for node in imports}

    def visit_ImportFrom(self, node: ast.ImportFrom):
        if id(node) not in self._imports:
            return node
        imported = ast.parse(f"{SPARSE!r} in __import__('sys').modules", mode="eval").body
        otherwise = [ast.Assign(targets=[ast.Name(alias.asname or alias.name, ast.Store())],
                                value=ast.Tuple([], ast.Load())) for alias in node.names]
        return ast.copy_location(ast.If(test=imported, body=[node], orelse=otherwise), node)
