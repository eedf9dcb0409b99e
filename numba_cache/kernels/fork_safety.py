"""Fork-safe numba function identities (numba issue 10486).

numba names every compiled function with a per-process counter. Sibling forks
inherit the counter and can give two different kernels the same LLVM symbol; a
later process loading both then runs the wrong body. Drawing the ids at random,
as ``pytensor.link.numba.cache`` also does, removes the collision. Installing it
twice (ours and PyTensor's) is harmless.
"""

from __future__ import annotations

import uuid

from numba.core.bytecode import FunctionIdentity


class RandomUniqueIds:
    """An endless iterator of random 128-bit integers (fresh OS entropy per call)."""

    def __iter__(self):
        return self

    def __next__(self) -> int:
        return uuid.uuid4().int


def install() -> None:
    if not isinstance(FunctionIdentity._unique_ids, RandomUniqueIds):
        FunctionIdentity._unique_ids = RandomUniqueIds()
