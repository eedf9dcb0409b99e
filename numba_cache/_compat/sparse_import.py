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
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from types import CodeType

from numba_cache import session

#: The package whose import the function defers.
SPARSE = "pytensor.sparse"


def _function():
    from pytensor.tensor import basic

    return basic._get_underlying_scalar_constant_value


def deferred():
    """The function's sparse import deferred meanwhile (a context manager); as upstream
    runs where it cannot be (:func:`deferred_code`)."""
    function = _function()
    code = deferred_code(function.__code__)

    def install():
        original = function.__code__
        if code is not None:
            function.__code__ = code
        return original

    def remove(original) -> None:
        function.__code__ = original

    return session.current().sparse_import_patch.applied(install, remove)


@functools.cache
def deferred_code(original: CodeType) -> CodeType | None:
    """The code of `original`'s function with each sparse import deferred, or None where
    that cannot be shown to change nothing."""
    try:
        source = textwrap.dedent(inspect.getsource(original))
    except (OSError, TypeError):  # no source installed: upstream runs as it is
        return None
    tree = ast.parse(source)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        return None
    definition = tree.body[0]
    imports = [node for node in ast.walk(definition) if isinstance(node, ast.ImportFrom)
               and (node.module or "").split(".")[:2] == SPARSE.split(".")]
    if not imports or not all(_only_classes_asked(definition, node) for node in imports):
        return None
    _Deferring(imports).visit(definition)
    ast.fix_missing_locations(tree)
    ast.increment_lineno(tree, original.co_firstlineno - 1)
    compiled = compile(tree, original.co_filename, "exec")
    [code] = [each for each in compiled.co_consts if isinstance(each, CodeType)]
    if (code.co_argcount, code.co_kwonlyargcount, code.co_freevars) != (
            original.co_argcount, original.co_kwonlyargcount, original.co_freevars):
        return None
    return code.replace(co_qualname=original.co_qualname)


def _only_classes_asked(definition: ast.FunctionDef, node: ast.ImportFrom) -> bool:
    """Whether every name `node` imports is bound nowhere else in the function and read only
    as the class argument of ``isinstance(value, name)``, the builtin."""
    names = {alias.asname or alias.name for alias in node.names}
    if node.level or "*" in names:
        return False
    as_class = {id(call.args[1]) for call in ast.walk(definition)
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == "isinstance" and len(call.args) == 2 and not call.keywords}
    for each in ast.walk(definition):
        if isinstance(each, ast.Name) and each.id in names and (
                not isinstance(each.ctx, ast.Load) or id(each) not in as_class):
            return False
        if isinstance(each, ast.Name) and each.id == "isinstance" and not isinstance(
                each.ctx, ast.Load):
            return False
        if isinstance(each, ast.Import | ast.ImportFrom) and each is not node and any(
                (alias.asname or alias.name) in names | {"isinstance"} for alias in each.names):
            return False
        if isinstance(each, ast.arg) and each.arg in names | {"isinstance"}:
            return False
    return True


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
