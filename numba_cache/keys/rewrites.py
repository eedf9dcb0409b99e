"""The pre-rewrite key: a graph as the user gave it, and everything rewriting depends on.

It lets a hit skip PyTensor's graph rewriting, which is most of a warm compile.
Components: the graph before rewriting (inputs, outputs and update outputs, see
:mod:`.graph`), the input specs (mutable, borrow) and output specs (borrow), the
mode's effective rewrite query, the registered rewrites (names and classes, so
registering or removing a rewrite invalidates; and the code of those from outside
PyTensor, :mod:`.foreign_code`), the PyTensor flags that steer rewriting, and the
environment fingerprint (which pins the PyTensor version).

Not covered, by nature: one of PyTensor's rewriters monkeypatched in place, or a
value a user's rewrite reads from its module; ``NBCACHE_DISABLE`` or a plain
``NUMBA`` mode avoid the shortcut.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable

from numba_cache import versions
from numba_cache._compat.pytensor_internals import mode_query
from numba_cache.keys.canonical import canonical, digest
from numba_cache.keys.graph import constant_digest, describe_graph
from numba_cache.keys.key import Key
from numba_cache.keys.foreign_code import describe_rewrite, foreign_code_digest

#: PyTensor flags read by rewrites (``floatX`` and ``numba__fastmath`` are in the fingerprint).
REWRITE_FLAGS = (
    "optimizer",
    "optimizer_including",
    "optimizer_excluding",
    "optimizer_requiring",
    "on_opt_error",
    "check_stack_trace",
    "cast_policy",
    "on_shape_error",
    "warn_float64",
    "optdb__max_use_ratio",
    "optdb__position_cutoff",
    "scan__allow_output_prealloc",
    "tensor__insert_inplace_optimizer_validate_nb",
)
#: PyTensor flags rewrites read one fact of, keyed as that fact: the value may name this
#: machine (a compiler's path), which a key shared by a fleet must not.
REWRITE_FLAG_FACTS = {
    "cxx": bool,  # a C++ compiler is set: fusion's operand limit is 1024, else 32
}

def describe_query(query, database=None) -> list:
    """A rewrite query (include/exclude/require tags...) or, failing that, the rewriter.

    ``Mode.optimizer`` wraps the rewriter a mode's query gives in an
    ``_ActiveModeGraphRewriter``; a mode built with another mode's ``optimizer``
    (as OpFromGraph inner modes and PyTensor's test helpers are) has that wrapper
    as its rewriter. It cannot be pickled, so it is described by the query it
    wraps when that query draws on `database` (PyTensor's registry by default),
    whose digest the key holds.
    Raises ``UnkeyableValue`` for a rewriter that cannot be described by content.
    """
    from pytensor.compile.mode import optdb
    from pytensor.graph.rewriting.db import RewriteDatabaseQuery

    database = optdb if database is None else database
    wrapped_mode = getattr(query, "_mode", None)
    if (type(query).__name__ == "_ActiveModeGraphRewriter"
            and getattr(wrapped_mode, "optdb", None) is database):
        return ["active mode", describe_query(mode_query(wrapped_mode), database)]
    if not isinstance(query, RewriteDatabaseQuery):
        return [canonical(query), foreign_code_digest(query)]
    return [
        "query",
        _tags(query.include),
        _tags(query.require),
        _tags(query.exclude),
        canonical(dict(query.subquery)),
        canonical(query.position_cutoff),
        [[canonical(rewrite), foreign_code_digest(rewrite)] for rewrite in query.extra_rewrites],
    ]


def _tags(tags) -> list:
    """Query tags in a canonical order. Not plain ``sorted``: PyTensor's own numba tests
    query ``include=[None]``, and None does not compare with a string."""
    return sorted((canonical(tag) for tag in tags), key=lambda tag: json.dumps(tag))


#: Modules that register more rewrites when PyTensor's numba dispatch is imported.
#: The digest of the registry is taken as if they were imported, so that it does
#: not depend on whether this process has converted an op yet (a warm process
#: never does). Importing them costs about 0.1 s (scipy.sparse), more than the
#: rest of a warm compile, so :func:`complete_rewrites_digest` avoids it.
REGISTERING_MODULES = ("pytensor.sparse.rewriting", "pytensor.typed_list.rewriting")
#: Of those, the one whose import is worth a round trip to the shared tier (scipy.sparse):
#: the others import in milliseconds.
COSTLY_MODULE = "pytensor.sparse"


def registered_rewrites_digest(database) -> str:
    """Digest of every rewrite registered in `database` now, recursively, by name and class."""
    seen: set[int] = set()
    names: list = []

    def walk(db):
        for name, rewrites in db.__db__.items():
            for rewrite in rewrites:
                if id(rewrite) not in seen:
                    seen.add(id(rewrite))
                    names.append([name, *describe_rewrite(rewrite)])
                    if hasattr(rewrite, "__db__"):
                        walk(rewrite)

    walk(database)
    return digest(sorted(names))


def complete_rewrites_digest(database, known: Callable[[str, bool], str | None],
                             remember: Callable[[str, str, bool], None]) -> str:
    """The registry digest once every module of :data:`REGISTERING_MODULES` is imported.

    When some are not imported yet, the digest of the registry as it stands
    determines the complete one (the same PyTensor, pinned by the fingerprint,
    registers the same rewrites on import), so ``known(partial, far)`` maps it to the
    complete digest recorded by an earlier process, `far` saying whether the import it
    saves is worth asking the shared tier (:data:`COSTLY_MODULE` is not imported); only
    when that is unknown are the modules imported, and the pair handed to `remember`
    (with `far`).
    """
    current = registered_rewrites_digest(database)
    if all(module in sys.modules for module in REGISTERING_MODULES):
        return current
    far = COSTLY_MODULE not in sys.modules
    complete = known(current, far)
    if complete is None:
        for module in REGISTERING_MODULES:
            importlib.import_module(module)
        complete = registered_rewrites_digest(database)
        remember(current, complete, far)
    return complete


def rewrite_key(fgraph, inputs, outputs, mode, fingerprint, rewrites_digest: str,
                hide_constants: bool = False) -> Key:
    """The pre-rewrite key of `fgraph` compiled with `mode` and these In/Out specs.

    `rewrites_digest` is :func:`complete_rewrites_digest` of ``mode.optdb``. With
    `hide_constants`, data constants are described by type and shape, not
    content: the key of a rewrite valid for any data that answers the questions
    rewriting asked of it the same way (see :mod:`.data_reads`).
    """
    from pytensor import config

    description = describe_graph(fgraph, hide_constants=hide_constants)
    data = "questions" if hide_constants else "content"
    return Key.from_components(
        "rewrite",
        f"rewrite of a graph of {len(fgraph.apply_nodes)} nodes ({data})",
        {
            "fingerprint": fingerprint.digest,
            "version": versions.REWRITE_CACHE,
            "graph": description.digest,
            "data": data,
            "inputs": [[bool(spec.mutable), bool(spec.borrow)] for spec in inputs],
            "outputs": [bool(spec.borrow) for spec in outputs],
            "query": describe_query(mode_query(mode), mode.optdb),
            "rewrites": rewrites_digest,
            "flags": {flag: str(getattr(config, flag)) for flag in REWRITE_FLAGS},
            "flag_facts": {flag: fact(getattr(config, flag))
                           for flag, fact in REWRITE_FLAG_FACTS.items()},
        },
    )


def content_key_from(data_key: Key, hidden: list) -> Key:
    """The key by content of the graph whose key by questions is `data_key`.

    That key describes each of the `hidden` constants by position, type and shape;
    with their contents added it describes the graph as fully as describing it
    again by content would, for the cost of hashing the data alone.
    """
    contents = [constant_digest(constant) for constant in hidden]
    return Key.from_components(
        "rewrite",
        data_key.summary.replace("(questions)", "(content)"),
        data_key.components | {"graph": digest([data_key.components["graph"], contents]),
                               "data": "content"},
    )
