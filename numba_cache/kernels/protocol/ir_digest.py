"""The digest of a kernel's code: the same in every process that compiles the same code.

numba mangles every function it compiles with a unique id (``B<n>v<digits>``)
and an ABI tag (``B<n><base64>``) that differ from one process (or one
dispatcher) to the next for the same code; environment names built from them
appear in string constants too, with their lengths, and string constants are named
by their ``hash()``, which differs by process. The same code also differs by what
numba compiled before in the process (see ``_PROCESS_NOISE``), in numba's own
functions above all, which are left out (:class:`_NumbasOwnFunctions`). Everything
else in the IR is the code; pickled constants are left out, so a difference only
in an object-mode block's Python code is not seen here (blocks are stored and
keyed apart).

A compile's code is digested twice (:class:`CodeDigests`): as it ends, and as its
module stood before numba's module passes
(:meth:`.self_contained.SelfContainedLibrary._optimize_final_module`). Neither
alone is the same in every process compiling the same code: numba links the
copies of its functions a module calls as its process first optimised them, and
the module passes inline them (LKJ's ``Sum{axis=0}``, F order: ``is_contiguous``,
after a process had compiled ahead); and one process typed a literal tuple index
by another of numba's templates than the other, a call where the other had none,
which the optimiser made the same code (LKJ's ``Squeeze{axis=0}``). Code whose
digests differ at both stages differs. The collision detector
(:mod:`numba_cache.kernels.outcomes.collisions`) compares these.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import NamedTuple

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


def graph_function_name(name: str) -> str | None:
    """`name` if it is a graph function's (``graph_<digest>``), else None."""
    return name if _GRAPH_FUNCTION_NAME.fullmatch(name) else None


class CodeDigests(NamedTuple):
    """Two digests of one compile's code: of its final IR, and of its module before
    numba's module passes (None where the library was optimised otherwise)."""

    final: str
    before_module_passes: str | None

    @classmethod
    def of(cls, library, final_ir: str, function_name: str | None = None) -> CodeDigests:
        """The digests of what `library` compiled, its final IR being `final_ir` (of the
        graph function `function_name`, if one)."""
        return cls(ir_digest(final_ir, function_name),
                   getattr(library, "digest_before_module_passes", None))

    def same_code(self, recorded: CodeDigests) -> bool:
        """Whether `recorded` (a :meth:`of` another compile's) is of the same code: equal
        final digests, or equal digests before the module passes. Process history
        changes one stage or the other, not the code: numba links its subroutines as
        the process first optimised them (the module passes then inline them), and
        types a literal tuple index by another template in one process than another
        (the function passes see another call)."""
        return self.final == recorded.final or (
            self.before_module_passes is not None
            and self.before_module_passes == recorded.before_module_passes)


#: Lines of about this many characters are normalized at a time.
_CHUNK = 1 << 20


def _normalized_pieces(llvm_ir: str, function_name: str | None = None) -> Iterator[str]:
    """:func:`normalized_ir` in pieces, a chunk of whole lines at a time. No name, and no
    instruction the normalization reads, spans two lines, and a function's local names
    are numbered whichever chunks it spans: the pieces are the same whatever the chunks."""
    if function_name is not None and graph_function_name(function_name) is None:
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
