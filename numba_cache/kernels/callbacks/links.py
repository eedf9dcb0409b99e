"""What stored machine code needs its process to define, checked before it is loaded.

A graph kernel is self-contained; code around an entry point is not: it calls
the graph kernel by symbol and names hidden constant buffers by symbol
(:mod:`.entry_point`). Loading object code whose symbols the process does not
define ends the process (LLVM reports a fatal error), and a symbol defined by
other code would run that code. So the symbols such code leaves undefined are
recorded when it is stored, sorted into three sets, and each must be met in
the loading process before the code is loaded:

- kernels: the graph kernel an entry point calls, for the numba signature it was
  called with. The loading process compiles (in practice loads) that kernel and
  its symbol must be the recorded one: a kernel compiled afresh has another.
- hidden buffers: registered by this process's entry points (:mod:`.hidden_symbols`).
- everything else (numba's runtime, the C API): found by the process's symbol
  search. Code that calls anything else is not stored.

LLVM intrinsics (``llvm.*``) are the code generator's own and need nothing;
declarations nothing uses (numba leaves some behind after inlining) emit no
symbol.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from numba_cache._compat import numba_internals
from numba_cache.kernels.callbacks import hidden_symbols
from numba_cache.kernels.outcomes.uncacheable import Uncacheable
from numba_cache.store import entry_layout


@dataclass(frozen=True)
class Links:
    #: ``[entry point index, numba signature (hex pickle), symbol]`` per kernel called.
    kernels: list
    hidden: list
    process: list

    def encode(self) -> bytes:
        return entry_layout.encode_cfunc_links(asdict(self))

    @classmethod
    def decode(cls, payload: bytes) -> Links:
        return cls(**entry_layout.decode_cfunc_links(payload))


def required(library, entry_points: Sequence) -> Links | Uncacheable:
    """The links of freshly compiled `library`, whose kernel calls go through `entry_points`."""
    import llvmlite.binding as llvm
    from numba.core import serialize

    kernels_by_symbol = {}
    for index, entry in enumerate(entry_points):
        verdict = numba_internals.dispatcher_cache(entry.kernel).verdict
        if verdict is not None:
            return Uncacheable("calls-uncacheable-kernel",
                               f"calls a graph kernel that is not stored ({verdict.reason})")
        for signature in entry.kernel_signatures:
            symbol = entry.kernel.overloads[signature].fndesc.mangled_name
            kernels_by_symbol[symbol] = [index, serialize.dumps(signature).hex(), symbol]
    kernels, hidden, process = [], [], []
    module = numba_internals.final_module(library)
    llvm_ir = str(module)
    for value in [*module.functions, *module.global_variables]:
        name = value.name
        if not value.is_declaration or name.startswith("llvm.") or not _used(llvm_ir, name):
            continue
        if name in kernels_by_symbol:
            kernels.append(kernels_by_symbol[name])
        elif name.startswith(hidden_symbols.PREFIX) and hidden_symbols.is_registered(name):
            hidden.append(name)
        elif llvm.address_of_symbol(name) is not None:
            process.append(name)
        else:
            return Uncacheable("unresolved-symbol",
                               f"calls {name}, which only this process's compiled code defines")
    return Links(sorted(kernels), sorted(hidden), sorted(process))


def _used(llvm_ir: str, name: str) -> bool:
    """True if `name` appears in `llvm_ir` other than in its own declaration."""
    reference = re.compile(rf'@(?:{re.escape(name)}|"{re.escape(name)}")(?![\w.$"])')
    return len(reference.findall(llvm_ir)) > 1


def unmet(links: Links, entry_points: Sequence) -> str | None:
    """Why `links` cannot be met in this process (after compiling the kernels they call), or None."""
    import llvmlite.binding as llvm
    from numba.core import serialize

    for index, signature_hex, symbol in links.kernels:
        if index >= len(entry_points):
            return f"no entry point {index}"
        kernel = entry_points[index].kernel
        signature = serialize.loads(bytes.fromhex(signature_hex))
        kernel.compile(signature)
        if kernel.overloads[signature].fndesc.mangled_name != symbol:
            return f"the kernel it calls was compiled again ({symbol[:60]}... is gone)"
    missing = [name for name in links.hidden if not hidden_symbols.is_registered(name)]
    missing += [name for name in links.process if llvm.address_of_symbol(name) is None]
    return f"{missing[0]} is not defined here" if missing else None
