"""What entries promise of each other, and the check that the store can keep those promises.

Two kinds of entry name others:

- a **rewrite** entry names the graph kernel its restored graph compiles to: the
  ``graph_kernel`` component, and the whole key in the ``graph_key`` blob (JSON);
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
                           decode_blocks, graph_key_fields)

#: The blobs :meth:`References.add` reads of an entry (``verify`` inflates only these).
BLOBS_READ = (*REWRITE_BLOBS, BLOCKS_BLOB)


@dataclass(frozen=True)
class Reference:
    """Entry (`fingerprint`, `key`) of `kind` refers to `target`: an entry's key, or a
    block's uuid when `to_block`."""

    fingerprint: str
    key: str
    kind: str
    target: str
    to_block: bool

    def describe(self) -> str:
        what = "object-mode block" if self.to_block else "graph kernel"
        return f"its {what} {self.target[:12]} is not in the store"


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
            self._references.append(Reference(entry.fingerprint, entry.key, entry.kind, target, False))
        for uuid in decode_blocks(entry.blobs.get(BLOCKS_BLOB), errors="replace"):
            self._references.append(Reference(entry.fingerprint, entry.key, entry.kind, uuid, True))
        return None

    def wrong_kinds(self) -> list[tuple[Reference, str]]:
        """References of rewrite entries to an entry of another kind than a graph kernel."""
        wrong = []
        for reference in self._references:
            if reference.to_block:
                continue
            kind = self._kinds.get((reference.fingerprint, reference.target))
            if kind not in (None, "graph"):
                article = "an" if kind[0] in "aeiou" else "a"
                wrong.append((reference, f"its graph kernel {reference.target[:12]} is {article} "
                                         f"{kind} entry"))
        return wrong

    def dangling(self) -> list[Reference]:
        """The references to entries or blocks the pass did not meet, in the order met."""
        return [
            reference for reference in self._references
            if (reference.fingerprint, reference.target)
            not in (self._blocks if reference.to_block else self._kinds)
        ]
