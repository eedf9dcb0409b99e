"""The thunk PyTensor's ``Function`` calls on every evaluation, generated per graph.

PyTensor's JIT linker calls the compiled graph as
``fgraph_jit(*(x[0] for x in thunk_inputs))`` and copies outputs in a ``zip``
loop: a generator and a loop per call, about 0.6 µs, more than a tenth of a
small model's call with ``trust_input=True``. The generated thunk names each
storage cell and each hidden constant (:mod:`numba_cache.keys.constants`) as a
default argument, so a call is one numba dispatch and plain stores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from numba_cache.codegen.module import compile_function


def thunk_source(inputs: int, hidden: int, outputs: int) -> str:
    """Source of ``thunk()`` for a graph of `inputs` inputs, `hidden` hidden constants
    and `outputs` outputs (at least one)."""
    cells = [f"i{position}" for position in range(inputs)]
    constants = [f"h{position}" for position in range(hidden)]
    results = [f"o{position}" for position in range(outputs)]
    defaults = ", ".join(f"{name}={name}" for name in ["kernel", *cells, *constants, *results, "failed"])
    arguments = ", ".join([f"{cell}[0]" for cell in cells] + constants)
    targets = ", ".join(f"{result}[0]" for result in results)
    return (
        f"def thunk({defaults}):\n"
        f"    try:\n"
        f"        outputs = kernel({arguments})\n"
        f"    except Exception:\n"
        f"        failed()\n"
        f"    {targets}, = outputs\n"
    )


def direct_thunk(kernel: Callable, input_cells: Sequence[list], hidden_values: Sequence,
                 output_cells: Sequence[list], failed: Callable[[], None]) -> Callable[[], None]:
    """A thunk computing `kernel` from `input_cells` and `hidden_values` into `output_cells`.

    `failed` is called inside the ``except`` block when the kernel raises (PyTensor's
    ``raise_with_op``, which re-raises with the graph's context).
    """
    source = thunk_source(len(input_cells), len(hidden_values), len(output_cells))
    namespace = {"kernel": kernel, "failed": failed}
    namespace |= {f"i{position}": cell for position, cell in enumerate(input_cells)}
    namespace |= {f"h{position}": value for position, value in enumerate(hidden_values)}
    namespace |= {f"o{position}": cell for position, cell in enumerate(output_cells)}
    filename = f"<numba_cache thunk {len(input_cells)}+{len(hidden_values)}->{len(output_cells)}>"
    return compile_function(source, "thunk", filename, namespace)
