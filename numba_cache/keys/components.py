"""One-line text forms of key components, for debug logs, ``show`` and ``explain``.

Key components (see :mod:`numba_cache.keys`) are JSON data: digests (64 hex
digits), canonical descriptions tagged by their first item (``["int", "3"]``,
``["props", "pytensor.tensor.type.TensorType", {"dtype": ..., "shape": ...}]``),
variable references (``"input[0]"``, ``"constant:<digest>"``, ``"node:<digest>[0]"``)
and, in graph keys, a list of node descriptions. :func:`brief` renders one value
(a tensor type as ``float64[?,3]``, a digest as its first 12 digits),
:func:`summarize` a whole set of components.
"""

from __future__ import annotations

import json
import re

#: Digits of a digest kept in text forms: enough to tell entries apart.
DIGEST_DIGITS = 12

_DIGEST = re.compile(r"[0-9a-f]{64}")
_TAG = re.compile(r"[a-z_]+")
_TENSOR_TYPE = "pytensor.tensor.type.TensorType"


def is_digest(value: object) -> bool:
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


def is_description(value: object) -> bool:
    """Whether `value` is a canonical description: a list tagged by its first item.

    Such a list is one value (``["props", "...TensorType", {...}]`` is a type), where
    other lists in components are sequences (the input types of a kernel).
    """
    return (
        isinstance(value, list)
        and len(value) >= 2
        and isinstance(value[0], str)
        and _TAG.fullmatch(value[0]) is not None
    )


def is_node_list(value: object) -> bool:
    """Whether `value` is the ``nodes`` component of a graph key."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(node, dict) and "op_digest" in node for node in value)
    )


def brief(value: object, width: int = 80) -> str:
    """`value` in one line of at most `width` characters."""
    text = _text(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def summarize(components: dict, width: int = 40) -> str:
    """``name=value`` for every component, each value cut to `width` characters."""
    return " ".join(f"{name}={brief(value, width)}" for name, value in components.items())


def _text(value: object) -> str:
    if isinstance(value, str):
        return value[:DIGEST_DIGITS] if is_digest(value) else value
    if is_node_list(value):
        return f"{len(value)} node{'s' if len(value) != 1 else ''}"
    if isinstance(value, list):
        tagged = _tagged(value)
        return tagged if tagged is not None else "[" + ", ".join(map(_text, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{name}: {_text(item)}" for name, item in value.items()) + "}"
    return json.dumps(value)


def _tagged(value: list) -> str | None:
    """The text of a canonical description (see :mod:`numba_cache.keys.canonical`), if it is one."""
    match value:
        case ["int", str(number)]:
            return number
        case ["float", str(hexadecimal)]:
            try:
                return repr(float.fromhex(hexadecimal))
            except ValueError:
                return None
        case ["tuple" | "list" as kind, list(items)]:
            inner = ", ".join(map(_text, items))
            return f"({inner})" if kind == "tuple" else f"[{inner}]"
        case ["props", str(class_name), dict(props)]:
            if class_name == _TENSOR_TYPE and {"dtype", "shape"} <= props.keys():
                return f"{_text(props['dtype'])}[{_dimensions(props['shape'])}]"
            arguments = ", ".join(f"{name}={_text(item)}" for name, item in props.items())
            return f"{class_name.rsplit('.', 1)[-1]}({arguments})"
    return None


def _dimensions(shape: object) -> str:
    """Static shape ``(None, 3)`` as ``?,3``."""
    match shape:
        case ["tuple", list(sizes)]:
            return ",".join("?" if size is None else _text(size) for size in sizes)
    return _text(shape)


def changed_components(recorded: dict, current: dict) -> list[str]:
    """``name=recorded value`` for each fingerprint component that differs from `current`."""
    return [
        f"{name}={recorded.get(name, 'absent')}"
        for name in sorted(set(recorded) | set(current))
        if recorded.get(name) != current.get(name)
    ]
