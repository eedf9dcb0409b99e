"""A graph of other static lengths served without converting its ops.

A graph kernel missing under its own key is looked up by its code
(:func:`numba_cache.keys.kernels.graph_code_key`), whose parts are the keys of the
op kernels it calls; those carry PyTensor's key of each op's conversion, so
learning them means converting every op, and importing PyTensor's numba dispatch
(about 0.1 s, the largest part of a new model's compile after PyTensor's rewrites).

The same model on data of other lengths is the same graph at kernel level
(:func:`numba_cache.keys.kernels.lengths_free_key`). Its op kernels are the same
when no conversion read a static length other than "known to be 1", nor the value
of a constant input the graph passes as an argument. PyTensor's dispatch contract
is that a conversion puts what it reads of a node into its key; so, once a graph is
converted, each of its op kernels' conversions is done again on its node with
other lengths (every length other than 1 made 2, then made 2L + 1) and variables
for its constants (:func:`reads_no_lengths`). When PyTensor's key comes out the
same each time for every step, the op kernel keys are remembered under the
lengths-free key (a side file of the store).

A later graph of that lengths-free key makes its code key from them. Only when the
code index names a stored graph kernel of that code is its conversion skipped
(counted as ``op_keys.remembered``): the graph kernel is loaded as a hit by code is,
its op kernels by key. Anything else converts, as before: no record, a damaged
one, a graph kernel evicted since, op kernels that cannot all be loaded (numba's
lookup then misses, and the miss converts before it compiles).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from numba_cache.keys.kernels import graph_code_key

#: The other static lengths a conversion is checked with: each length other than 1
#: (and unknown) made small, then large.
PROBE_LENGTHS: tuple[Callable[[int], int], ...] = (
    lambda length: 3 if length == 2 else 2,
    lambda length: 2 * length + 1,
)


def reads_no_lengths(node, pytensor_key: str, convert: Callable) -> bool:
    """Whether converting `node` gives PyTensor's key `pytensor_key` again with its static
    lengths changed and its inputs all variables (:data:`PROBE_LENGTHS`).

    ``convert(node)`` returns PyTensor's key of a node's conversion. A node that
    cannot be rebuilt so, or whose conversion fails, reads them as far as this can tell.
    """
    for probe in PROBE_LENGTHS:
        try:
            other = node.op.make_node(*(_other_lengths(variable.type, probe)()
                                        for variable in node.inputs))
            with warnings.catch_warnings():  # not this graph's conversion: nothing to tell
                warnings.simplefilter("ignore")
                if str(convert(other)) != pytensor_key:
                    return False
        except Exception:
            return False
    return True


def _other_lengths(pytensor_type, probe: Callable[[int], int]):
    """`pytensor_type` with `probe` applied to each static length other than 1, if it is a
    plain tensor type: the only type an op kernel key describes without its lengths."""
    from pytensor.tensor.type import TensorType

    if type(pytensor_type) is not TensorType:
        return pytensor_type
    shape = tuple(length if length in (None, 1) else probe(length)
                  for length in pytensor_type.shape)
    return pytensor_type.clone(shape=shape)


def remembered_code_key(context, lengths_free, graph_key, generated):
    """The code key of the graph kernel of `graph_key`, from the op kernel keys remembered for
    its lengths-free key `lengths_free`, or None if none are."""
    op_keys = context.store.op_keys_of(context.fingerprint.digest, lengths_free.digest)
    if op_keys is None or len(op_keys) != len(generated.steps):
        return None
    return graph_code_key(graph_key, generated, op_keys)


def remember(context, lengths_free, steps: list, kernels: dict, convert: Callable) -> None:
    """Record the op kernel keys of `steps` under `lengths_free` if no conversion of theirs reads
    a static length or a constant. `kernels` maps a step's kernel to its node, its op
    kernel key and PyTensor's key of that node's conversion. Each op kernel is checked
    once: the verdicts are kept in the process (``context.lengths_read``) and the store."""
    if not steps:  # nothing converted, nothing to remember
        return
    fingerprint = context.fingerprint.digest
    checked = context.lengths_read
    checked.update(context.store.lengths_read(fingerprint))
    found: dict[str, bool] = {}
    try:
        for step in steps:
            node, key, pytensor_key = kernels[step.kernel]
            if key.digest not in checked:
                checked[key.digest] = found[key.digest] = not reads_no_lengths(
                    node, pytensor_key, convert)
            if checked[key.digest]:
                return
    finally:
        context.store.record_lengths_read(fingerprint, found)
    context.store.record_op_keys_of(fingerprint, lengths_free.digest,
                                    [kernels[step.kernel][1].digest for step in steps], far=True)
