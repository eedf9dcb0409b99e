"""The collision detector: hits recompiled and compared with what the store served.

A key that misses something the code depends on (issue 20: CSR and CSC sparse
kernels shared one) serves one program's code to another, silently. With
``NBCACHE_VERIFY_HITS`` (a fraction of hits, ``1`` for all) a sampled hit is
compiled again and the digest of its LLVM IR compared with the digest stored
with the served code; a mismatch removes the entry, warns naming the key looked
up and the key the served code was compiled under, and counts ``collision``
(``numba-cache stats``). ``NBCACHE_VERIFY_LIMIT`` caps the hits verified per
process (``numba-cache verify --recompile N`` uses it). Off, the hit path pays
one attribute check.

numba mangles every function it compiles with a unique id (``B<n>v<digits>``)
and an ABI tag (``B<n><base64>``) that differ from one process (or one
dispatcher) to the next for the same code; environment names built from them
appear in string constants too, with their lengths, and string constants are named
by their ``hash()``, which differs by process. The same code also differs by what
numba compiled before in the process (see ``_PROCESS_NOISE``), in numba's own
functions above all, which are left out (:class:`_NumbasOwnFunctions`). Everything
else in the IR is the code; pickled constants are left out of the comparison, so
a collision only in an object-mode block's Python code is not seen here (blocks
are stored and keyed apart).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterator
from typing import NamedTuple

from numba_cache import logs, session
from numba_cache.kernels.outcomes import report
from numba_cache.keys.key import Key
from numba_cache.store import StoreWarning, entry_layout

_UNIQUE_ID = re.compile(r"B(\d+)v")
_LENGTH_TAG = re.compile(r"B(\d+)")
_ENVIRONMENT_STRING = re.compile(r'\[\d+ x i8\] c"missing Environment: ')


#: What a graph function's own name becomes in a digest (:func:`ir_digest`).
_FUNCTION_NAME = "graph_function"
_GRAPH_FUNCTION_NAME = re.compile(r"graph_[0-9a-f]+")


def normalized_ir(llvm_ir: str, function_name: str | None = None) -> str:
    """`llvm_ir` with what differs between processes compiling the same code replaced
    (:func:`ir_digest`); `function_name` is a graph function's name."""
    return "".join(_normalized_pieces(llvm_ir, function_name))


def ir_digest(llvm_ir: str, function_name: str | None = None) -> str:
    """The sha256 of :func:`normalized_ir`, hashed piece by piece: a large graph's IR is
    megabytes, and the compile's peak memory is reached while it is stored.

    A graph function's name is its graph key's (``graph_<digest>``), and two graphs
    of one code share their compiled function (:func:`numba_cache.keys.kernels.graph_code_key`),
    so graph kernels are digested with `function_name` normalized too.
    """
    digest = hashlib.sha256()
    for piece in _normalized_pieces(llvm_ir, function_name):
        digest.update(piece.encode())
    return digest.hexdigest()


#: Lines of about this many characters are normalized at a time.
_CHUNK = 1 << 20


def _normalized_pieces(llvm_ir: str, function_name: str | None = None) -> Iterator[str]:
    """:func:`normalized_ir` in pieces, a chunk of whole lines at a time. No name, and no
    instruction the normalization reads, spans two lines, and a function's local names
    are numbered whichever chunks it spans: the pieces are the same whatever the chunks."""
    if function_name is not None and not _GRAPH_FUNCTION_NAME.fullmatch(function_name):
        raise ValueError(f"{function_name!r} is not a graph function's name")
    names, numbas, strings = _LocalNames(), _NumbasOwnFunctions(), _StringConstants()
    start = 0
    while start < len(llvm_ir):
        end = llvm_ir.find("\n", start + _CHUNK)
        end = len(llvm_ir) if end < 0 else end + 1
        # A newline ahead, so that the patterns of whole lines see the first one too.
        text = "\n" + "".join(_without_unique_ids(llvm_ir[start:end], function_name))
        if "@.const.pick" in text or "@_ZN08NumbaEnv" in text:
            text = _PICKLE_NAME.sub(r"\1", _PICKLE_LENGTH.sub(r"\1_", _PROCESS_NOISE.sub("", text)))
        text = strings.numbered(text)
        for function_starts, piece in _functions(text[1:]):
            if function_starts:
                yield names.end_function()
            yield names.without_names(numbas.without_them(piece, function_starts))
        start = end
    yield names.end_function()


def _functions(text: str) -> Iterator[tuple[bool, str]]:
    """`text` cut before each function definition: (whether a function starts, piece)."""
    start = 0
    while True:
        found = text.find("\ndefine ", start)
        end = len(text) if found < 0 else found + 1
        if end > start:
            yield text.startswith("define ", start), text[start:end]
        if found < 0:
            return
        start = end


def _without_unique_ids(text: str, function_name: str | None) -> Iterator[str]:
    position = 0
    for match in _UNIQUE_ID.finditer(text):
        if match.start() < position:
            continue
        end = match.start() + len("B") + len(match.group(1)) + int(match.group(1))
        if not text[match.end():end].isdigit():
            continue  # not a numba-mangled name
        yield _without_names(text[position:match.start()], function_name)
        # The ABI tag follows, except in the names of functions numba made without one
        # (object-mode blocks' wrappers).
        tag = _LENGTH_TAG.match(text, end)
        yield "B_v_" if tag is None else "B_v_B_"
        position = end if tag is None else tag.end() + int(tag.group(1))
    yield _without_names(text[position:], function_name)


def _without_names(text: str, function_name: str | None) -> str:
    text = _ENVIRONMENT_STRING.sub('[_ x i8] c"missing Environment: ', text)
    return text if function_name is None else text.replace(function_name, _FUNCTION_NAME)


#: What else differs between processes compiling the same code, by what numba did in
#: the process before: pickled constants (object-mode functions with a uuid, numba
#: types numbered in the order the process made them, sets in hash order), the
#: environment pointers of subroutines numba compiled earlier for another kernel, and
#: what the optimiser made of those subroutines (``freeze`` instructions, the numbers
#: in local names: :class:`_LocalNames`).
_PROCESS_NOISE = re.compile(r"\n(?:@\.const\.pick(?:ledata|lebuf)\.|@_ZN08NumbaEnv)[^\n]*")
_PICKLE_NAME = re.compile(r"(@\.const\.pick(?:ledata|lebuf)\.)[0-9a-f]+")
#: The length of pickled data numba passes to ``numba_unpickle`` with it.
_PICKLE_LENGTH = re.compile(r"(@\.const\.pickledata\.[0-9a-f]*, i\d+ )\d+")
_FREEZE = re.compile(r"\n[ \t]*(%[-\w$.]+) = freeze \S+ (%[-\w$.]+)(?=\n)")
_LABEL = re.compile(r"\n([-\w$.]+):")
#: The comment LLVM prints after a label (``; preds = %B0``), padded to a column: a label
#: named otherwise in another process (an inlined block's suffix) is padded otherwise.
_LABEL_COMMENT = re.compile(r"(\n[-\w$.]+:)[ \t]*;[^\n]*")
_LOCAL = re.compile(r"(%[-\w$.]+)")


#: A definition of one of numba's own functions (its implementation of ``np.ascontiguousarray``...).
_NUMBAS_OWN = re.compile(r"define [^@\n]*@_ZN5numba")
#: A string constant of numba's, named by the string's ``hash()``, another in every process.
_STRING_CONSTANT = re.compile(r"@\.bytes\.-?\d+\b")


class _NumbasOwnFunctions:
    """Leaves out the definitions of numba's own functions, across chunks. Their code is
    numba's (its version is in the fingerprint), called under names that spell their
    types; what the optimiser makes of them depends on what numba compiled before in the
    process (one compiled for an earlier kernel is linked in as it was optimised then),
    so a kernel's verifying compile in another process differed there alone."""

    def __init__(self):
        self._inside = False

    def without_them(self, piece: str, function_starts: bool) -> str:
        if function_starts:
            self._inside = _NUMBAS_OWN.match(piece) is not None
        if not self._inside:
            return piece
        end = piece.find("\n}\n")
        if end < 0:
            return ""
        self._inside = False
        return piece[end + len("\n}\n"):]


class _StringConstants:
    """numba's string constants, named by their hash, numbered in order of appearance."""

    def __init__(self):
        self._numbers: dict[str, int] = {}

    def numbered(self, text: str) -> str:
        if "@.bytes." not in text:
            return text
        return _STRING_CONSTANT.sub(
            lambda match: f"@.bytes.{self._numbers.setdefault(match[0], len(self._numbers))}",
            text)


class _LocalNames:
    """A function's local names (values, arguments, labels) replaced by the order in which
    they first appear, a frozen value by what it froze: its text without them, then,
    once the function ends, that order."""

    def __init__(self):
        self._first: dict[str, int] = {}
        self._frozen: dict[str, str] = {}
        self._order: list[int] = []

    def without_names(self, text: str) -> str:
        """`text`, whole lines of one function, without its local names and ``freeze``
        instructions (each noted as a name for its operand)."""
        text = "\n" + text  # the patterns of whole lines see the first one too
        if " = freeze " in text:
            for frozen, source in _FREEZE.findall(text):
                self._frozen[frozen] = self._frozen.get(source, source)
            text = _FREEZE.sub("", text)
        parts = _LOCAL.split(_LABEL.sub(r"\n%\1:", _LABEL_COMMENT.sub(r"\1", text))[1:])
        names = parts[1::2]
        if self._frozen:
            names = [self._frozen.get(name, name) for name in names]
        first = self._first
        self._order.extend(first.setdefault(name, len(first)) for name in names)
        return "%".join(parts[0::2])

    def end_function(self) -> str:
        order = self._order
        self._first, self._frozen, self._order = {}, {}, []
        return f"\x00{order}\n" if order else ""


class Collision(NamedTuple):
    """A hit whose served code differs from what its key compiles to now."""

    key: Key  # the key looked up
    made_under: Key  # the key the served code was stored under (may be `key` itself)


def found() -> list[Collision]:
    """The collisions found in this process, in order."""
    return list(session.current().collisions)


def sampled(settings) -> bool:
    """Whether to verify a hit, given `settings` with ``verify_hits`` on (not 0)."""
    state = session.current()
    limit = settings.verify_hits_limit
    if limit and state.hits_sampled >= limit:
        return False
    rate = settings.verify_hits
    if rate >= 1.0 or random.random() < rate:
        state.hits_sampled += 1
        return True
    return False


def served_code_matches(context, key, served, signature, llvm_ir: str,
                        function_name: str | None = None) -> bool:
    """Whether the entry `served` under `key` holds the code compiled now (`llvm_ir`, of
    the graph function `function_name`, if a graph kernel's).

    On a mismatch the entry is removed, counted as ``collision`` and warned about.
    """
    recorded = served.blobs.get(entry_layout.ir_digest_blob_name(signature))
    if recorded is None:  # written by a numba_cache that recorded no IR: nothing to compare
        report.record(context, "verify.unrecorded")
        return True
    # Graph entries written before graph functions were digested without their names
    # hold the digest of the IR as it is.
    recorded = entry_layout.decode_digest(recorded)
    if recorded == ir_digest(llvm_ir, function_name) or (
            function_name is not None and recorded == ir_digest(llvm_ir)):
        report.record(context, "verify.same")
        return True
    made_under = Key.from_components(served.kind, served.summary, served.components)
    if made_under.digest == key.digest:
        origin = "made under the same key: the key misses something the code depends on"
    else:
        origin = f"made under key {made_under.short} ({made_under.summary})"
    logs.warn(
        f"numba_cache: key collision: entry {key.short} ({key.summary}) served code that differs "
        f"from what it compiles to now ({origin}); entry removed, compiled code used",
        StoreWarning,
        stacklevel=2,
    )
    report.record(context, "collision")
    session.current().collisions.append(Collision(key, made_under))
    context.store.remove(context.fingerprint.digest, key.digest)
    return False
