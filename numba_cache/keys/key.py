"""The :class:`Key` type: a sha256 digest that keeps what it was made of."""

from __future__ import annotations

from dataclasses import dataclass

from numba_cache.keys.canonical import digest


@dataclass(frozen=True)
class Key:
    """A cache key: `digest` is the sha256 of `components`.

    `components` is JSON data naming each ingredient (the fingerprint, the op and
    its properties, types, constants, ...), kept so that a miss can be explained
    by diffing the components of two keys. `kind` is one of the store's kinds
    (``"graph"``, ``"op"``, ``"rewrite"``, ``"objmode"``); `summary` is a short
    human description of what the key stands for.
    """

    kind: str
    summary: str
    components: dict
    digest: str

    @classmethod
    def from_components(cls, kind: str, summary: str, components: dict) -> Key:
        return cls(kind, summary, components, digest(components))

    def specialized(self, **extra) -> Key:
        """This key with more components, e.g. the numba signature of one overload."""
        return Key.from_components(self.kind, self.summary, self.components | extra)

    @property
    def short(self) -> str:
        return self.digest[:12]
