"""Why a compile missed: the key components that differ from the nearest stored entry.

:func:`observe` runs a target (a Python file, or ``module:callable``) in this
process with the store read-only, so that explaining changes nothing, and
collects every kernel lookup it makes. :func:`explain_lookups` compares each
missed key with the most similar stored entry of the same kind (:func:`nearest`)
and lists the :func:`differences` between their components:

- the nodes of two graph keys are aligned op by op, so a changed op (or a
  constant folded into one) is named by its node,
  ``nodes[0].op: Composite{(2.0 * exp(i0))} → Composite{(3.0 * exp(i0))}``,
  and a rewired or changed input by its node and position;
- two fingerprints are compared by the components the store recorded for each
  (``Store.record_fingerprint``): ``fingerprint.numba: 0.68.0 → 0.69.0``;
- other components item by item: ``inputs[0]: float64[?] → float32[?]``,
  ``flags.optimizer: fast_run → fast_compile``.

A :class:`Difference` reads old → new: old is the stored entry's value, new is
what this run looked up (comparing two stored entries, the first's and the
second's). Lookups happen when numba compiles, at a function's first call, so
the target must call the functions it compiles.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import importlib.util
import os
import re
import runpy
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

from numba_cache import settings
from numba_cache.kernels.outcomes.report import Lookup, observe_lookups
from numba_cache.keys.components import DIGEST_DIGITS, brief, is_description, is_node_list
from numba_cache.logs import logger
from numba_cache.store import CorruptEntry, Entry, Store, StoreWarning
from numba_cache.store.entry import is_sha256_hex

#: How a component missing on one side reads.
ABSENT = "absent"

_OP_CLASS = re.compile(r"[A-Za-z_][\w.]*")


class TargetError(ValueError):
    """The target names no Python file and no ``module:callable``."""


@dataclass(frozen=True)
class Difference:
    """One component that differs: `old` is the stored (or first) value, `new` this run's."""

    component: str
    old: str
    new: str


@dataclass(frozen=True)
class Explanation:
    """A lookup, and for a miss the nearest stored entry and what differs from it."""

    lookup: Lookup
    nearest: Entry | None
    differences: list[Difference]


@dataclass(frozen=True)
class Observation:
    """The lookups a target made, each key once, and how the target failed if it did."""

    lookups: list[Lookup]
    failure: str | None


def observe(target: str) -> Observation:
    """Run `target` with the store read-only, collecting its lookups.

    Raises :class:`TargetError` if `target` cannot be found. An exception raised by
    the target itself ends the run, not the observation: it is the ``failure``.
    """
    run = resolve_target(target)
    failure = None
    with _readonly_store(), observe_lookups() as lookups:
        try:
            run()
        except SystemExit as exit_:
            if exit_.code not in (None, 0):
                failure = f"it exited with status {exit_.code}"
        except Exception as error:  # the target's own failure; what it looked up still counts
            logger.debug("the target %s failed", target, exc_info=True)
            failure = f"{type(error).__name__}: {error}"
    first_of_each: dict[str, Lookup] = {}
    for lookup in lookups:
        first_of_each.setdefault(lookup.key.digest, lookup)
    return Observation(list(first_of_each.values()), failure)


def resolve_target(target: str) -> Callable[[], object]:
    """A function running `target`: a file as ``python FILE`` would, or a callable
    named ``module:function`` (imported from the working directory) without arguments;
    it returns what the callable returns (None for a file).
    """
    path = Path(target)
    if path.suffix == ".py" or path.is_file():
        if not path.is_file():
            raise TargetError(f"no such file: {target}")
        return functools.partial(_run_file, path)
    module_name, _, attribute = target.partition(":")
    if not (module_name and attribute):
        raise TargetError(f"{target!r} is neither a Python file nor module:callable")
    if module_name.endswith(".py"):  # finding "x.py" as a module would run x.py first
        raise TargetError(f"{target!r}: give a file ({module_name}) or a module's callable "
                          f"({module_name.removesuffix('.py')}:{attribute})")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(module_name) is not None
    except ImportError:
        found = False
    if not found:
        raise TargetError(f"no module named {module_name!r}")
    return functools.partial(_call, module_name, attribute)


def explain_lookups(
    store: Store, lookups: Iterable[Lookup], stored_before: Collection[str] | None = None
) -> list[Explanation]:
    """Explain each miss against the nearest stored entry of its kind; others as they are.

    With `stored_before` (entry keys), only those entries are compared with: a session
    explained at its end stored its own misses meanwhile, and they explain nothing.
    """
    lookups = list(lookups)
    fingerprints = {lookup.fingerprint.digest: lookup.fingerprint.components for lookup in lookups}

    def fingerprint_components(digest: object) -> dict | None:
        if not (isinstance(digest, str) and is_sha256_hex(digest)):
            return None  # a component read from disk, perhaps of no fingerprint at all
        if digest not in fingerprints:
            fingerprints[digest] = store.fingerprint_components(digest)
        return fingerprints[digest]

    stored_by_kind: dict[str, list[Entry]] = {}
    explanations = []
    for lookup in lookups:
        if lookup.decision != "miss":
            explanations.append(Explanation(lookup, None, []))
            continue
        key = lookup.key
        if key.kind not in stored_by_kind:
            stored_by_kind[key.kind] = list(stored_entries(store, key.kind, stored_before))
        found = nearest(key.components, stored_by_kind[key.kind], fingerprint_components, key.summary)
        if found is None:
            explanations.append(Explanation(lookup, None, []))
            continue
        found_differences = differences(
            found.components,
            key.components,
            names=key.components,  # what the stored entry keeps besides its key is no cause
            old_fingerprint=fingerprint_components(found.fingerprint),
            new_fingerprint=lookup.fingerprint.components,
        )
        explanations.append(Explanation(lookup, found, found_differences))
    return explanations


def compare_entries(store: Store, old: Entry, new: Entry) -> list[Difference]:
    """What differs between two stored entries (with their components)."""
    return differences(
        old.components,
        new.components,
        old_fingerprint=store.fingerprint_components(old.fingerprint),
        new_fingerprint=store.fingerprint_components(new.fingerprint),
    )


def stored_entries(
    store: Store, kind: str, among: Collection[str] | None = None
) -> Iterator[Entry]:
    """The readable entries of `kind`, as listed (last use, hits), with their components;
    only those whose key is `among` the given ones, if given."""
    for entry in store.entries(kind=kind):
        if among is not None and entry.key not in among:
            continue
        try:
            content = store.read(entry.fingerprint, entry.key)
        except (CorruptEntry, OSError):
            continue  # verify reports it; it is no explanation of anything
        if content is not None:
            entry.components = content.components
            yield entry


def nearest(
    components: dict,
    candidates: Iterable[Entry],
    fingerprint_components: Callable[[str], dict | None] = lambda digest: None,
    summary: str | None = None,
) -> Entry | None:
    """The candidate whose components are most like `components`.

    Likeness is the number of equal components, where a graph's nodes count for
    the share of ops the two graphs have in common and two fingerprints for the
    share of their components (given by `fingerprint_components`) that are equal:
    a kernel compiled under another PyTensor flag is nearer than another graph.
    Ties go to an entry with the same `summary`, then of the same fingerprint,
    then to the most recently used.
    """
    return max(
        candidates,
        key=lambda entry: (
            _likeness(entry.components, components, fingerprint_components),
            entry.summary == summary,
            entry.fingerprint == components.get("fingerprint"),
            entry.last_used,
        ),
        default=None,
    )


def differences(
    old: dict,
    new: dict,
    *,
    names: Iterable[str] | None = None,
    old_fingerprint: dict | None = None,
    new_fingerprint: dict | None = None,
) -> list[Difference]:
    """The differences between two sets of key components, in the order of `names`.

    `names` defaults to every component of either side. `old_fingerprint` and
    `new_fingerprint` are the components of the two fingerprints, when known.
    """
    if names is None:
        names = [*new, *(name for name in old if name not in new)]
    graph = is_node_list(old.get("nodes")) and is_node_list(new.get("nodes"))
    found: list[Difference] = []
    for name in names:
        old_value, new_value = old.get(name, ABSENT), new.get(name, ABSENT)
        if old_value == new_value or (graph and name == "outputs"):
            continue  # a graph's outputs are compared with its nodes, aligned
        if name == "fingerprint":
            found += _fingerprint_differences(old_value, new_value, old_fingerprint, new_fingerprint)
        elif name == "nodes" and graph:
            found += _graph_differences(old["nodes"], new["nodes"], old, new)
        else:
            found += _value_differences(name, old_value, new_value)
    structural = ("inputs", "outputs", "nodes")
    if graph and any(difference.component.startswith(structural) for difference in found):
        # The graph digest is made of the rest: it differs when they do.
        found = [difference for difference in found if difference.component != "graph"]
    return found


def _likeness(old: dict, new: dict, fingerprint_components: Callable[[str], dict | None]) -> float:
    score = 0.0
    for name, value in new.items():
        other = old.get(name, ABSENT)
        if other == value:
            score += 1
        elif is_node_list(value) and is_node_list(other):
            score += _shared_ops(other, value)
        elif name == "fingerprint" and other is not ABSENT:
            old_components, new_components = fingerprint_components(other), fingerprint_components(value)
            if old_components and new_components:
                names = old_components.keys() | new_components.keys()
                equal = sum(old_components.get(n) == new_components.get(n) for n in names)
                score += equal / len(names)
    return score


def _shared_ops(old_nodes: list, new_nodes: list) -> float:
    """How much two graphs' ops have in common, from 0 to 1: the same ops count fully,
    ops of the same class (``Composite{...}`` with another constant) half."""
    same = _common([node["op_digest"] for node in old_nodes], [node["op_digest"] for node in new_nodes])
    same_class = _common(list(map(_op_class, old_nodes)), list(map(_op_class, new_nodes)))
    return (same + 0.5 * same_class) / (1.5 * max(len(old_nodes), len(new_nodes)))


def _common(old: list, new: list) -> int:
    return sum((Counter(old) & Counter(new)).values())


def _op_class(node: dict) -> str:
    match = _OP_CLASS.match(node.get("op", ""))
    return match.group() if match else node["op_digest"]


def _value_differences(path: str, old: object, new: object) -> list[Difference]:
    if old == new:
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        names = [*old, *(name for name in new if name not in old)]
        return [
            difference
            for name in names
            for difference in _value_differences(
                f"{path}.{name}", old.get(name, ABSENT), new.get(name, ABSENT)
            )
        ]
    if _is_sequence(old) and _is_sequence(new) and len(old) == len(new):
        return [
            difference
            for position, (old_item, new_item) in enumerate(zip(old, new))
            for difference in _value_differences(f"{path}[{position}]", old_item, new_item)
        ]
    return [Difference(path, _text(old), _text(new))]


def _fingerprint_differences(
    old_digest: str, new_digest: str, old: dict | None, new: dict | None
) -> list[Difference]:
    if old is None or new is None:
        unknown = " (components not recorded)"
        return [
            Difference(
                "fingerprint",
                _text(old_digest) + (unknown if old is None else ""),
                _text(new_digest) + (unknown if new is None else ""),
            )
        ]
    found = []
    for name in [*old, *(name for name in new if name not in old)]:
        old_value, new_value = old.get(name, ABSENT), new.get(name, ABSENT)
        if old_value == new_value:
            continue
        if _is_feature_list(old_value) and _is_feature_list(new_value):
            # CPU features are one long string; only the flags that differ matter.
            old_flags, new_flags = old_value.split(","), new_value.split(",")
            old_value = ",".join(flag for flag in old_flags if flag not in new_flags) or "(none)"
            new_value = ",".join(flag for flag in new_flags if flag not in old_flags) or "(none)"
        found.append(Difference(f"fingerprint.{name}", _text(old_value), _text(new_value)))
    return found or [Difference("fingerprint", _text(old_digest), _text(new_digest))]


def _graph_differences(old_nodes: list, new_nodes: list, old: dict, new: dict) -> list[Difference]:
    """Nodes and outputs of two graph keys, the nodes aligned by their ops (a diff)."""
    matcher = difflib.SequenceMatcher(
        None,
        [node["op_digest"] for node in old_nodes],
        [node["op_digest"] for node in new_nodes],
        autojunk=False,
    )
    found: list[Difference] = []
    aligned: dict[int, int] = {}  # old position to new position
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        pairs = list(zip(range(old_start, old_end), range(new_start, new_end)))
        aligned.update(pairs)
        if tag == "replace":
            found += [_op_difference(j, old_nodes[i], new_nodes[j]) for i, j in pairs]
        found += [
            Difference(f"nodes[{i}] (stored)", _op_text(old_nodes[i]), ABSENT)
            for i in range(old_start + len(pairs), old_end)
        ]
        found += [
            Difference(f"nodes[{j}]", ABSENT, _op_text(new_nodes[j]))
            for j in range(new_start + len(pairs), new_end)
        ]
    old_references = _References(old_nodes, aligned)
    new_references = _References(new_nodes, {j: j for j in range(len(new_nodes))})
    for i, j in sorted(aligned.items(), key=lambda pair: pair[1]):
        found += _reference_differences(
            f"nodes[{j}].inputs",
            old_nodes[i]["inputs"],
            new_nodes[j]["inputs"],
            old_references,
            new_references,
        )
    found += _reference_differences(
        "outputs", old.get("outputs", []), new.get("outputs", []), old_references, new_references
    )
    return found


def _reference_differences(
    path: str, old: list, new: list, old_references: _References, new_references: _References
) -> list[Difference]:
    return [
        Difference(f"{path}[{position}]", old_references.text(a), new_references.text(b))
        for position, (a, b) in enumerate(zip_longest(old, new))
        if old_references.place(a) != new_references.place(b)
    ]


class _References:
    """Variable references of a graph key (``input[0]``, ``constant:<digest>``,
    ``node:<digest>[0]``), with the node placed at its position in the new graph, so
    that a node whose digest changed only because something upstream did is no cause.
    """

    def __init__(self, nodes: list, new_positions: dict[int, int]):
        self._positions = {
            node["node"][:DIGEST_DIGITS]: new_positions.get(position)
            for position, node in enumerate(nodes)
        }

    def place(self, reference: str | None) -> object:
        if reference is None or not reference.startswith("node:"):
            return reference
        digest, _, output = reference.removeprefix("node:").partition("[")
        position = self._positions.get(digest[:DIGEST_DIGITS])
        return reference if position is None else ("node", position, output.rstrip("]"))

    def text(self, reference: str | None) -> str:
        if reference is None:
            return ABSENT
        place = self.place(reference)
        if isinstance(place, tuple):
            return f"nodes[{place[1]}] output {place[2]}"
        return reference.replace(":", " ")


def _op_difference(position: int, old_node: dict, new_node: dict) -> Difference:
    old_text, new_text = _op_text(old_node), _op_text(new_node)
    if old_text == new_text:  # the text is cut short; the digests tell them apart
        old_text += f" (op {old_node['op_digest'][:DIGEST_DIGITS]})"
        new_text += f" (op {new_node['op_digest'][:DIGEST_DIGITS]})"
    return Difference(f"nodes[{position}].op", old_text, new_text)


def _op_text(node: dict) -> str:
    return node.get("op") or node["op_digest"][:DIGEST_DIGITS]


def _text(value: object) -> str:
    return ABSENT if value is ABSENT else brief(value, width=100)


def _is_sequence(value: object) -> bool:
    return isinstance(value, list) and not is_description(value)


def _is_feature_list(value: object) -> bool:
    return isinstance(value, str) and value.count(",") >= 4


@contextlib.contextmanager
def _readonly_store() -> Iterator[None]:
    before = settings.current()
    settings.configure(readonly=True)
    try:
        with warnings.catch_warnings():
            # Saving and counting nothing is the point here, not news.
            warnings.filterwarnings("ignore", ".* is read-only", StoreWarning)
            yield
    finally:
        python_value = before.source_of("readonly") == "python"
        settings.configure(readonly=before.readonly if python_value else None)


def _run_file(path: Path) -> None:
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(path)]
    sys.path.insert(0, str(path.resolve().parent))
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _call(module_name: str, attribute: str):
    target = importlib.import_module(module_name)
    for name in attribute.split("."):
        target = getattr(target, name)
    return target()
