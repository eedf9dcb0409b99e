"""What rewriting learned from observed data, so that new data can skip rewriting.

Observed data enters graphs as large constants (see :mod:`.constants`). Rewriting
asks a few questions of their values: is this index array non-negative and how
small a dtype holds it, is it an ``arange``, are all its elements equal, is this
matrix diagonal. A rewritten graph is valid for new data of the same type and
shape exactly when every question asked gets the same answer from the new data.

:class:`DataReads` watches every read of a data constant's values while PyTensor
rewrites. A read by a reader known to :mod:`.data_readers` is recorded as a
question with its answer, the reader's *summary* of the values. A read by any
other code, or a merge of a data constant with a different constant, makes the
rewrite *data-bound*: the rewritten graph is then cached by content only.

Constants that rewriting derives from data count as that data, with the steps
that derive them (an :class:`Origin`): a lossless cast (index arrays downcast to
``uint8``), or a constant fold of an op over one data constant (``y[1:]`` of an
observed series). Their reads are watched too, and the steps are replayed on new
data to fill the stored graph's slots.

Reads are seen through a property on ``TensorConstant.data``
(:mod:`numba_cache._compat.tensor_constant_data`), there only while a rewrite is
watched.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

from numba_cache import session
from numba_cache._compat import tensor_constant_data
from numba_cache._compat.pytensor_internals import CONSTANT_FOLDING
from numba_cache.keys.constants import HIDDEN_MIN_SIZE, hidden_constants
from numba_cache.rewritten.data_readers import reader_summary

#: The reader behind PyTensor's merging of equal constants, checked apart.
MERGE_SIGNATURE = "pytensor.tensor.variable.TensorConstant.signature"


@dataclass(frozen=True)
class Origin:
    """A constant holds data constant `position`, derived by `steps`.

    Positions are those of :func:`.constants.hidden_constants` on the graph
    before rewriting. A step is ``("cast", dtype)`` or ``("fold", n)``, the
    n-th :class:`Fold` of the rewrite.
    """

    position: int
    steps: tuple = ()

    def then(self, step: tuple) -> Origin:
        return Origin(self.position, (*self.steps, step))


@dataclass(frozen=True)
class Fold:
    """A constant fold of `op` whose input `index` is data; the other inputs as they were.

    `shape` and `dtype` are those of the first result: a fold of other data
    that gives another (a boolean mask selecting more elements) derives nothing.
    """

    op: object
    index: int
    inputs: tuple
    shape: tuple = ()
    dtype: str = ""

    def same_as(self, other: Fold) -> bool:
        """The same function of the data: equal ops, data at one index, equal other inputs."""
        return (self.op == other.op and self.index == other.index
                and (self.shape, self.dtype) == (other.shape, other.dtype)
                and len(self.inputs) == len(other.inputs)
                and all(_same_constant(a, b) for a, b in zip(self.inputs, other.inputs)))

    def apply(self, data: np.ndarray) -> np.ndarray:
        from pytensor.tensor import constant

        inputs = [constant(data) if i == self.index else x for i, x in enumerate(self.inputs)]
        node = self.op.make_node(*inputs)
        storage = [[None] for _ in node.outputs]
        self.op.perform(node, [x.data for x in node.inputs], storage)
        return np.asarray(storage[0][0])

    def replay(self, data: np.ndarray) -> np.ndarray | None:
        """:meth:`apply`, or None when the result is not of the first result's shape and dtype."""
        result = self.apply(data)
        return result if (result.shape, result.dtype.str) == (self.shape, self.dtype) else None


def derive(original_data: np.ndarray, steps: tuple, folds: list) -> np.ndarray | None:
    """The values `steps` derive from `original_data`, or None when they derive nothing.

    Nothing: a cast would lose values, or a fold fails or gives another shape.
    """
    data = original_data
    for kind, argument in steps:
        try:
            data = _lossless_cast(data, argument) if kind == "cast" else folds[argument].replay(data)
        except Exception:  # as PyTensor's fold of this data would: not the stored graph's
            return None
        if data is None:
            return None
    return data


class AmbiguousOrigin(Exception):
    """A constant's values match more than one piece of data."""


@dataclass
class DataReads:
    """The questions rewriting asked of the data constants of one graph, and answers.

    `answers` maps ``(origin, reader)`` to the summary; `folds` lists the folds
    steps refer to; `bound_by` lists why the rewrite is data-bound (empty when
    it is not).
    """

    originals: list
    answers: dict = field(default_factory=dict)
    folds: list = field(default_factory=list)
    bound_by: list = field(default_factory=list)
    #: (origin, values) of every piece of data seen so far
    _known: list = field(init=False, repr=False)
    #: id -> (the constant, kept alive so its id is not reused; its origin)
    _origins: dict = field(default_factory=dict, init=False, repr=False)
    #: merge signature -> [(constant, origin)]
    _signed: dict = field(default_factory=dict, init=False, repr=False)
    _folded_nodes: set = field(default_factory=set, init=False, repr=False)

    def __post_init__(self):
        self._known = [(Origin(position), _raw(c)) for position, c in enumerate(self.originals)]

    def origin(self, constant) -> Origin | None:
        """Where `constant`'s values come from: data, or none (made by rewriting alone).

        Raises :class:`AmbiguousOrigin` when they could come from more than one.
        """
        key = id(constant)
        if key not in self._origins:
            self._origins[key] = (constant, self._find_origin(constant))
        found = self._origins[key][1]
        if isinstance(found, AmbiguousOrigin):
            raise found
        return found

    def _find_origin(self, constant):
        data = _raw(constant)
        for position, original in enumerate(self.originals):
            if original is constant or _same_buffer(_raw(original), data):
                return Origin(position)
        # Equal values alone are not the data: a constant rewriting made (a folded
        # ``eye`` or ``arange``) may equal this data, and holds its own values for any other.
        matches = {origin if values.dtype == data.dtype else origin.then(("cast", data.dtype.str))
                   for origin, values in self._known
                   if (origin.steps or values.dtype != data.dtype)
                   and _is_lossless_cast(values, data)}
        if len(matches) > 1 and not self._one_selection(matches):
            return AmbiguousOrigin(f"a constant equal to data {sorted(m.position for m in matches)}")
        return min(matches, key=lambda m: len(m.steps)) if matches else None

    def _one_selection(self, origins) -> bool:
        """Whether `origins` select the same elements of one datum, for any data.

        True when they all start from one data constant and take only layout
        steps (slices, dimshuffles, reshapes, and casts, which commute with
        them), and give the same result on an array of distinct elements: each
        output element then comes from the same input element, whatever the data.
        """
        positions = {origin.position for origin in origins}
        if len(positions) != 1:
            return False
        folds = [self.folds[n] for origin in origins for kind, n in origin.steps if kind == "fold"]
        if not all(isinstance(fold.op, _layout_ops()) for fold in folds):
            return False
        shape = _raw(self.originals[positions.pop()]).shape
        probe = np.arange(int(np.prod(shape)), dtype="int64").reshape(shape)
        selections = []
        for origin in origins:
            selection = probe
            for kind, n in origin.steps:
                selection = self.folds[n].apply(selection) if kind == "fold" else selection
            selections.append(selection)
        return all(np.array_equal(selections[0], other) for other in selections[1:])

    def read(self, constant, reader: str, frame) -> None:
        try:
            origin = self.origin(constant)
        except AmbiguousOrigin as exc:
            self.bound_by.append(f"{reader} read {exc}")
            return
        if reader == MERGE_SIGNATURE:
            self._check_merge(constant, origin)
        elif origin is None:
            return
        elif reader == CONSTANT_FOLDING:
            node = folded_node(frame)
            if node is None:  # fail closed: a fold not followed would be served to new data
                self.bound_by.append(
                    f"constant folding read data constant {origin.position}, and the node it "
                    "folds could not be seen (has PyTensor renamed its local 'node'?)")
                return
            self._fold(node, constant, origin)
        elif (summary := reader_summary(reader)) is not None:
            self.answers[(origin, reader)] = summary(_raw(constant))
        else:
            self.bound_by.append(f"{reader} read data constant {origin.position}")

    def _fold(self, node, constant, origin) -> None:
        """Record the fold of `node` over data, unless it mixes data or has many outputs."""
        if id(node) in self._folded_nodes:
            return
        self._folded_nodes.add(id(node))
        data_inputs = [i for i, x in enumerate(node.inputs) if x is constant]
        others_are_structure = all(
            i in data_inputs or not _is_data_sized(x) or self.origin(x) is None
            for i, x in enumerate(node.inputs))
        if len(data_inputs) != 1 or len(node.outputs) != 1 or not others_are_structure:
            self.bound_by.append(f"a fold of {node.op} mixes data constants")
            return
        index = data_inputs[0]
        others = tuple(None if i == index else x for i, x in enumerate(node.inputs))
        try:
            values = Fold(node.op, index, others).apply(_raw(constant))
        except Exception as exc:  # PyTensor will not fold it either; nothing derived
            self.bound_by.append(f"a fold of {node.op} over data failed ({exc!r})")
            return
        if values.ndim == 0 or values.size < HIDDEN_MIN_SIZE:
            self.bound_by.append(f"a fold of {node.op} makes a small constant of data")
            return  # frozen into the rewritten graph, not a slot the kernel is given
        fold = Fold(node.op, index, others, values.shape, values.dtype.str)
        number = next((n for n, known in enumerate(self.folds) if known.same_as(fold)), None)
        if number is None:
            self.folds.append(fold)
            number = len(self.folds) - 1
        self._known.append((origin.then(("fold", number)), values))

    def _check_merge(self, constant, origin) -> None:
        """Bound if `constant` merges with a constant of another origin.

        Constants merge when their signatures are equal, as in PyTensor's
        MergeFeature, which reads the data through this signature.
        """
        same = self._signed.setdefault(constant.signature(), [])
        for other, other_origin in same:
            if other is not constant and origin != other_origin:
                self.bound_by.append("a data constant equals another constant (merged)")
        if not any(other is constant for other, _ in same):
            same.append((constant, origin))

    def recipe(self, rewritten) -> list:
        """Where each hidden constant of the rewritten graph comes from.

        One :class:`Origin` per hidden constant of `rewritten`, in its canonical
        order, or None for a constant made by rewriting alone. Marks the
        rewrite data-bound when one is ambiguous.
        """
        recipe = []
        for constant in hidden_constants(rewritten):
            try:
                origin = self.origin(constant)
            except AmbiguousOrigin as exc:
                self.bound_by.append(f"the rewritten graph holds {exc}")
                origin = None
            else:
                if origin is None:  # fail closed: derived from data in a way not followed?
                    self.bound_by.append("the rewritten graph holds a data-sized constant "
                                         "not known to be data")
            recipe.append(origin)
        for op, constant in _inner_graph_constants(rewritten):
            try:
                inner = _is_data_sized(constant) and self.origin(constant) is not None
            except AmbiguousOrigin:
                inner = True
            if inner:  # frozen into an inner graph, not a slot the kernel is given
                self.bound_by.append(f"data inside the inner graph of {op}")
        return recipe

    def equal_origins(self, recipe: list) -> dict:
        """Which of the data's values are equal, as PyTensor's merging of constants sees it.

        Rewriting merges equal constants and then simplifies (``f(a) - f(a)`` is 0,
        where ``inf - inf`` is nan): data whose values are equal where the first
        data's were not, or the other way round, is not rewritten the same way.
        ``{"origins": [[position, steps]...], "equal": [[i, j]...]}`` over the data, its
        folds and the origins of `recipe` and of the questions.
        """
        origins = {origin for origin, _ in self._known}
        origins |= {origin for origin in recipe if origin is not None}
        origins |= {origin for origin, _ in self.answers}
        listed = sorted([origin.position, origin.steps] for origin in origins)
        return {"origins": listed,
                "equal": equal_pairs(self.originals, listed, self.folds)}

    def questions(self) -> list:
        """The recorded questions in a canonical order: ``[position, steps, reader]``."""
        return sorted([origin.position, origin.steps, reader] for origin, reader in self.answers)

    def answer_list(self) -> list:
        return [self.answers[(Origin(position, steps), reader)]
                for position, steps, reader in self.questions()]


def answers_for(originals: list, questions: list, folds: list) -> list | None:
    """The answers the data of `originals` gives to `questions`, or None if it cannot.

    None when a cast the rewritten graph relies on would lose values.
    """
    answers = []
    for position, steps, reader in questions:
        data = derive(_raw(originals[position]), steps, folds)
        if data is None:
            return None
        answers.append(reader_summary(reader)(data))
    return answers


def equal_pairs(originals: list, origins: list, folds: list) -> list | None:
    """``[i, j]`` for each pair of `origins` whose values, derived from the data of
    `originals`, PyTensor's merging takes as equal; None if one cannot be derived."""
    from pytensor.tensor import constant

    signatures = []
    for position, steps in origins:
        data = derive(_raw(originals[position]), tuple(map(tuple, steps)), folds)
        if data is None:
            return None
        signatures.append(constant(data).signature())
    return [[i, j] for i in range(len(signatures)) for j in range(i + 1, len(signatures))
            if signatures[i] == signatures[j]]


def _layout_ops() -> tuple:
    from pytensor.tensor.elemwise import DimShuffle
    from pytensor.tensor.shape import Reshape, SpecifyShape
    from pytensor.tensor.subtensor import Subtensor

    return DimShuffle, Reshape, SpecifyShape, Subtensor


def _lossless_cast(data: np.ndarray, dtype) -> np.ndarray | None:
    """`data` as `dtype` (itself if it is already), or None when the cast would lose values."""
    if data.dtype == dtype:
        return data
    # Values the cast cannot hold (inf or nan as an integer, overflow) are what the round
    # trip finds: numpy's warning about them would fail a compile run with warnings as errors.
    with np.errstate(invalid="ignore", over="ignore"):
        cast = data.astype(dtype)
        return cast if _equal_values(cast.astype(data.dtype), data) else None


def _is_lossless_cast(source: np.ndarray, data) -> bool:
    """Whether `data` holds exactly the values of `source`, cast without loss."""
    if not isinstance(data, np.ndarray) or source.shape != data.shape:
        return False
    cast = _lossless_cast(source, data.dtype)
    return cast is not None and _equal_values(cast, data)


def _equal_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal element by element, nan equal to nan (data with missing values is data too)."""
    return np.array_equal(a, b, equal_nan=a.dtype.kind in "fc" and b.dtype.kind in "fc")


def _same_buffer(a: np.ndarray, b) -> bool:
    """Whether `b` is `a` or a view of the very same elements of it."""
    return b is a or (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                      and a.strides == b.strides
                      and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def _inner_graph_constants(fgraph):
    """``(op, constant)`` for every constant in the inner graphs of `fgraph`'s ops, nested."""
    from pytensor.graph.basic import Constant
    from pytensor.graph.op import HasMultipleInnerGraph
    from pytensor.graph.traversal import ancestors

    stack = [node.op for node in fgraph.apply_nodes if isinstance(node.op, HasMultipleInnerGraph)]
    seen: set = set()
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        for graph in op.inner_graphs.values():
            for variable in ancestors(graph.outputs):
                if isinstance(variable, Constant):
                    yield op, variable
                elif variable.owner is not None and isinstance(variable.owner.op,
                                                                HasMultipleInnerGraph):
                    stack.append(variable.owner.op)


def _is_data_sized(variable) -> bool:
    data = variable.__dict__.get("data")
    return isinstance(data, np.ndarray) and data.size >= HIDDEN_MIN_SIZE


def _same_constant(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return a.type == b.type and _raw(a).shape == _raw(b).shape and _equal_values(_raw(a), _raw(b))


def _raw(constant):
    return constant.__dict__["data"]


class watch:
    """Context manager: record reads of data constants into `reads` meanwhile.

    The facts PyTensor cached on the data constants (an earlier rewrite's, or the
    user's ``unique_value``) are set aside meanwhile: read from there, they would
    answer a question no read of the values asked. An attribute that may be such a
    fact, of a kind not known, makes the rewrite data-bound. Watched rewrites run
    one thread at a time, so that none reads a fact another recomputed meanwhile.
    """

    def __init__(self, reads: DataReads):
        self._reads = reads

    def __enter__(self) -> DataReads:
        state = session.current()
        state.watched_rewrite_lock.acquire()
        try:
            for position, constant in enumerate(self._reads.originals):
                if unknown := tensor_constant_data.unknown_facts(constant):
                    self._reads.bound_by.append(
                        f"data constant {position} holds {', '.join(unknown)}, which "
                        "rewriting may read instead of its values")
            self._set_aside = [(constant, tensor_constant_data.facts_set_aside(constant))
                               for constant in self._reads.originals]
            self._property = tensor_constant_data.reads_seen_by(_seen)
            self._property.__enter__()
        except BaseException:
            state.watched_rewrite_lock.release()
            raise
        self._token = state.data_reads_watching.set(self._reads)
        return self._reads

    def __exit__(self, *exc_info) -> None:
        state = session.current()
        try:
            state.data_reads_watching.reset(self._token)
            self._property.__exit__(*exc_info)
            for constant, facts in self._set_aside:
                tensor_constant_data.put_facts_back(constant, facts)
        finally:
            state.watched_rewrite_lock.release()


def folded_node(frame):
    """The node PyTensor's constant folding is folding, read from its frame; None if unseen.

    The upstream seam: ``unconditional_constant_folding`` holds it in its local
    ``node`` (PyTensor 3.3). Anything else seen there counts as unseen.
    """
    from pytensor.graph.basic import Apply

    node = frame.f_locals.get("node")
    return node if isinstance(node, Apply) else None


def _seen(constant, data):
    """``TensorConstant.data`` while watched: `data`, its read recorded if rewriting made it."""
    watching = session.current().data_reads_watching
    reads = watching.get()
    if reads is not None and isinstance(data, np.ndarray) and data.size >= HIDDEN_MIN_SIZE:
        caller = sys._getframe(2)  # past the property
        reader = f"{caller.f_globals.get('__name__')}.{caller.f_code.co_qualname}"
        token = watching.set(None)  # summaries and folds read data too: not rewriting's reads
        try:
            reads.read(constant, reader, caller)
        except Exception as exc:  # watching must never break a compile
            reads.bound_by.append(f"could not follow a read by {reader} ({exc!r})")
        finally:
            watching.reset(token)
    return data
