"""What entries promise of each other, and the check that the store can keep those promises.

Three kinds of entry name others:

- a **rewrite** entry names the graph kernel its restored graph compiles to: the
  ``graph_kernel`` component, and the whole key in the ``graph_key`` blob (JSON);
- a **graph** kernel entry lists, per signature, the op kernels its code calls by
  symbol (an ``op-links:`` blob): it is loaded only once they are;
- a **kernel** entry (graph or op) holding object-mode blocks lists their uuids in
  the ``objmode_blocks`` blob; each block's entry has the uuid as its ``block``
  component.

A promise that cannot be honoured (a rewrite's graph key unreadable, of another
kind, fingerprint or digest than its entry says, or naming an entry of another
kind) makes the entry unusable: a problem, which ``verify --repair`` removes and
a lookup treats as a miss. A reference to an entry that is not in the store is
*dangling*: normal after eviction, a partial import, or a remote tier holding one
entry but not the other. It costs a compile when used (the graph kernel, or the
block at its first run), never a wrong result, so it is reported, not repaired.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .entry import Entry
from .entry_layout import (BLOCK_COMPONENT, BLOCKS_BLOB, GRAPH_KERNEL_COMPONENT, REWRITE_BLOBS,
                           decode_blocks, decode_op_links, graph_key_fields, is_op_links_blob)

#: What a reference's target is, by its kind: a block is found by uuid, the others by key.
_TARGETS = {"graph": "graph kernel", "op": "op kernel", "block": "object-mode block"}


def reads_blob(name: str) -> bool:
    """Whether :meth:`References.add` reads the blob `name` (``verify`` inflates only those)."""
    return name in REWRITE_BLOBS or name == BLOCKS_BLOB or is_op_links_blob(name)


@dataclass(frozen=True)
class Reference:
    """Entry (`fingerprint`, `key`) of `kind` refers to `target`, an entry's key, or a
    block's uuid; `target_kind` is one of :data:`_TARGETS`."""

    fingerprint: str
    key: str
    kind: str
    target: str
    target_kind: str

    def describe(self) -> str:
        return f"its {_TARGETS[self.target_kind]} {self.target[:12]} is not in the store"


@dataclass
class References:
    """What the entries met in one pass over a store provide and refer to (no blobs kept)."""

    _kinds: dict[tuple[str, str], str] = field(default_factory=dict)
    _blocks: set[tuple[str, str]] = field(default_factory=set)
    _references: list[Reference] = field(default_factory=list)

    def add(self, entry: Entry) -> str | None:
        """Note a decoded entry; what is wrong with its promises, or None."""
        self._kinds[(entry.fingerprint, entry.key)] = entry.kind
        if not entry.cacheable:
            return None
        if entry.kind == "objmode" and BLOCK_COMPONENT in entry.components:
            self._blocks.add((entry.fingerprint, str(entry.components[BLOCK_COMPONENT])))
        if entry.kind == "rewrite":
            try:
                graph_key_fields(entry)
            except ValueError as error:
                return str(error)
            target = entry.components[GRAPH_KERNEL_COMPONENT]
            self._refer(entry, target, "graph")
        if entry.kind == "graph":
            try:
                targets = sorted({key for name, blob in entry.blobs.items()
                                  if is_op_links_blob(name)
                                  for key, _, _ in decode_op_links(blob)})
            except (ValueError, TypeError) as error:
                return f"its list of the op kernels it calls is unreadable ({error})"
            for target in targets:
                self._refer(entry, target, "op")
        for uuid in decode_blocks(entry.blobs.get(BLOCKS_BLOB), errors="replace"):
            self._refer(entry, uuid, "block")
        return None

    def _refer(self, entry: Entry, target: str, target_kind: str) -> None:
        self._references.append(
            Reference(entry.fingerprint, entry.key, entry.kind, target, target_kind))

    def wrong_kinds(self) -> list[tuple[Reference, str]]:
        """References to an entry of another kind than they name (a rewrite's graph
        kernel, a graph kernel's op kernels)."""
        wrong = []
        for reference in self._references:
            if reference.target_kind == "block":
                continue
            kind = self._kinds.get((reference.fingerprint, reference.target))
            if kind not in (None, reference.target_kind):
                article = "an" if kind[0] in "aeiou" else "a"
                wrong.append((reference, f"its {_TARGETS[reference.target_kind]} "
                                         f"{reference.target[:12]} is {article} {kind} entry"))
        return wrong

    def dangling(self) -> list[Reference]:
        """The references to entries or blocks the pass did not meet, in the order met."""
        return [
            reference for reference in self._references
            if (reference.fingerprint, reference.target)
            not in (self._blocks if reference.target_kind == "block" else self._kinds)
        ]
