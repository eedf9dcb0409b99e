"""Notes on the remote tier: small facts about a fingerprint that spare a fresh store work,
stored as entries under reserved keys and signed like any entry.

- The *vouch* (:data:`VOUCH`, at :data:`VOUCH_KEY`): the self-test passed for this
  fingerprint. The self-test (:mod:`numba_cache.kernels.context`) compiles probe kernels
  once per fingerprint and local store; a new store whose tier vouches for the exact
  fingerprint digest (every package version, the CPU, numba's and PyTensor's settings)
  skips the checks that compile: they would compile the same code with the same numba
  and give the same answer.
- The *completed registry* (:data:`REGISTRY`, at :func:`registry_key`): a rewrite key
  holds the digest of PyTensor's rewrite registry as if the modules that register
  rewrites on import were imported (:func:`numba_cache.keys.rewrites.complete_rewrites_digest`);
  a process that has not imported them learns the complete digest from a note, or imports
  them (about 0.17 s: ``scipy.sparse``). The same PyTensor, pinned by the fingerprint the
  note is filed under, registers the same rewrites.

- The *code index* (:data:`CODE`, at :func:`code_key`) and the *remembered op kernel
  keys* (:data:`OP_KEYS`, at :func:`op_keys_key`): the side files
  (:mod:`.side_files`) that let a graph of other static lengths find the graph kernel
  of its code without converting its ops
  (:mod:`numba_cache.kernels.assembly.remembered_op_keys`). A fresh store learns them
  from the tier, so that a new dataset's size costs a machine of the fleet what it
  costs the machine that stored them: no graph kernel compiled, no op converted.

A note is a JSON object: its kind's format, what it is about, and its value.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from .entry import is_sha256_hex
from .record import CorruptEntry


@dataclass(frozen=True)
class NoteKind:
    """A kind of note: its format tag, the field naming what a note is about, and the field
    holding its value, of `value_type`."""

    format: str
    about: str
    value: str
    value_type: type

    def encode(self, about: str, value) -> bytes:
        return json.dumps({"format": self.format, self.about: about, self.value: value},
                          sort_keys=True).encode()

    def decode(self, about: str, data: bytes):
        """The value of a note of this kind about `about`; raises :class:`CorruptEntry` for
        anything else (the tier then counts it as damaged and deletes it)."""
        try:
            note = json.loads(data)
        except ValueError as error:
            raise CorruptEntry(f"not a note: {error}") from None
        if not (isinstance(note, dict) and note.get("format") == self.format
                and note.get(self.about) == about
                and isinstance(note.get(self.value), self.value_type)
                and self.valid(note[self.value])):
            raise CorruptEntry(f"not a {self.format} note about {about[:12]}")
        return note[self.value]

    @staticmethod
    def valid(value) -> bool:
        """Whether a value of the right type is one this kind can hold."""
        return True


class KeysNoteKind(NoteKind):
    """A note whose value is one key (a SHA-256 hex digest), or a non-empty list of them."""

    @staticmethod
    def valid(value) -> bool:
        keys = value if isinstance(value, list) else [value]
        return bool(keys) and all(isinstance(key, str) and is_sha256_hex(key) for key in keys)


VOUCH = NoteKind("numba_cache vouch 1", "fingerprint", "components", dict)
REGISTRY = NoteKind("numba_cache completed registry 1", "partial", "complete", str)
CODE = KeysNoteKind("numba_cache graph of code 1", "code", "graph", str)
OP_KEYS = KeysNoteKind("numba_cache op keys 1", "graph", "op_keys", list)

#: The address of a fingerprint's vouch: no kernel's key (a SHA-256 of its components).
VOUCH_KEY = hashlib.sha256(b"numba_cache: the self-test passed for this fingerprint").hexdigest()


def registry_key(partial: str) -> str:
    """The address of the note for the registry digest `partial` (no kernel's key)."""
    return hashlib.sha256(f"numba_cache: the registry {partial} completed".encode()).hexdigest()


def code_key(code: str) -> str:
    """The address of the note naming the graph kernel of code key `code` (no kernel's key)."""
    return hashlib.sha256(f"numba_cache: the graph kernel of code {code}".encode()).hexdigest()


def op_keys_key(graph: str) -> str:
    """The address of the note listing the op kernel keys of lengths-free graph key `graph`."""
    return hashlib.sha256(f"numba_cache: the op kernels of graph {graph}".encode()).hexdigest()


def notes_of_side_tables(fingerprint: str, components: dict | None, tables: dict,
                         stored: set[str]) -> dict[str, bytes]:
    """The notes a local store makes for the tier, by address, from what its side files
    record of `fingerprint` (``SideFilesOfStore.side_tables``): its vouch where the
    self-test passed there (`components` recorded), every completed registry, and every
    code-index and op-keys record whose kernels are all `stored` locally (a note naming
    a kernel the tier is not sent would only send a fresh store looking for it)."""
    notes = {} if components is None else {VOUCH_KEY: VOUCH.encode(fingerprint, components)}
    for partial, complete in tables["registries"].items():
        notes[registry_key(partial)] = REGISTRY.encode(partial, complete)
    for code, graph in tables["code_index"].items():
        if graph in stored:
            notes[code_key(code)] = CODE.encode(code, graph)
    for graph, op_keys in tables["remembered_op_keys"].items():
        if stored.issuperset(op_keys):
            notes[op_keys_key(graph)] = OP_KEYS.encode(graph, op_keys)
    return notes
