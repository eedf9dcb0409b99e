"""Fork-safe numba function identities (numba issue 10486).

numba names every compiled function with a per-process counter
(``FunctionIdentity._unique_ids``). Sibling forks inherit the counter and can
give two different kernels the same LLVM symbol; a later process loading both
then runs the wrong body. Drawing the ids at random, as
``pytensor.link.numba.cache`` also does, removes the collision. Installing it
twice (ours and PyTensor's) is harmless. The seam is checked by what numba does
with it: a function identity made after :func:`install` must carry a random id.
"""

from __future__ import annotations

import uuid

from numba_cache._compat import require, seam

#: Ids drawn at random are 128-bit; numba's counter would need 2**64 functions to get there.
_RANDOM_ID_FLOOR = 1 << 64


class RandomUniqueIds:
    """An endless iterator of random 128-bit integers (fresh OS entropy per call)."""

    def __iter__(self):
        return self

    def __next__(self) -> int:
        return uuid.uuid4().int | _RANDOM_ID_FLOOR


def install() -> None:
    from numba.core.bytecode import FunctionIdentity

    if not isinstance(FunctionIdentity._unique_ids, RandomUniqueIds):
        FunctionIdentity._unique_ids = RandomUniqueIds()


@seam("FunctionIdentity._unique_ids", "numba", ("0.68",), "integration/linker.py")
def check() -> None:
    from numba.core.bytecode import FunctionIdentity

    install()
    identity = FunctionIdentity.from_function(check)
    require(identity.unique_id >= _RANDOM_ID_FLOOR,
            f"a new function got id {identity.unique_id}: numba no longer draws ids from "
            "FunctionIdentity._unique_ids, so forked processes may name two kernels alike")
