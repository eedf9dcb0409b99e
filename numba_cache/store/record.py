"""The on-disk format of one entry: pure serialization, no I/O and no policy.

A record is::

    b"NBCACHE3" | metadata length (4 bytes, big-endian) | SHA-256 of the metadata (32 bytes)
                | metadata (JSON, UTF-8) | blobs

The metadata names the entry (``key``, ``fingerprint``), describes it (``kind``,
``summary``, ``components``, ``cacheable``, ``reason``, ``created``,
``tool_version``) and lists the blobs in order as ``{"name", "size", "sha256",
"encoding", "decoded_size"}``; the blobs follow, concatenated. ``size`` and
``sha256`` describe the stored bytes, which are zlib-compressed (level 1: object
code shrinks to about a third, and decompressing a kernel costs about a
millisecond) unless that would not make them smaller (``encoding`` ``"raw"``).
Every byte is covered: the magic and lengths are checked, the metadata by its
checksum, each blob by the checksum the metadata holds and by its decoded size.
So a truncated, bit-flipped or misplaced record is a :class:`CorruptEntry`,
never a wrong kernel nor an entry that merely reads differently. Records of
format 2 (``NBCACHE2``: the same, every blob raw, no encoding fields) are read.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections.abc import Container
from importlib.metadata import PackageNotFoundError, version

from .. import versions
from .entry import KINDS, Entry, check_address

MAGIC = b"NBCACHE%d" % versions.RECORD
_FORMAT_2_MAGIC = b"NBCACHE2"
_COMPRESSION_LEVEL = 1
_LENGTH = struct.Struct(">I")
_DIGEST_SIZE = hashlib.sha256().digest_size
_HEADER_SIZE = len(MAGIC) + _LENGTH.size + _DIGEST_SIZE


def _installed_version() -> str:
    try:
        return version("numba_cache")
    except PackageNotFoundError:
        return "unknown"


#: The numba_cache version written into new records, for diagnosis only.
TOOL_VERSION = _installed_version()


class CorruptEntry(Exception):
    """A record cannot be trusted; the message says why."""


def encode(entry: Entry) -> bytes:
    """The record of `entry`.

    Raises ValueError for an entry that could never be decoded (bad address, unknown
    kind, an uncacheable marker with blobs or without a reason, components that are
    not JSON).
    """
    check_address(entry.fingerprint, entry.key)
    if entry.kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {entry.kind!r}")
    if not entry.cacheable and (entry.blobs or not entry.reason):
        raise ValueError("an uncacheable marker needs a reason and no blobs")
    stored = [(name, data, *_stored_form(data)) for name, data in entry.blobs.items()]
    metadata = {
        "key": entry.key,
        "fingerprint": entry.fingerprint,
        "kind": entry.kind,
        "summary": entry.summary,
        "components": entry.components,
        "cacheable": entry.cacheable,
        "reason": entry.reason,
        "created": entry.created,
        "tool_version": TOOL_VERSION,
        "blobs": [
            {"name": name, "size": len(form), "sha256": hashlib.sha256(form).hexdigest(),
             "encoding": encoding, "decoded_size": len(data)}
            for name, data, encoding, form in stored
        ],
    }
    try:
        text = json.dumps(metadata, ensure_ascii=False, separators=(",", ":")).encode()
    except (TypeError, ValueError) as error:
        raise ValueError(f"the metadata of an entry must be JSON-serializable: {error}") from None
    header = [MAGIC, _LENGTH.pack(len(text)), hashlib.sha256(text).digest()]
    return b"".join([*header, text, *(form for *_, form in stored)])


def merged(theirs: bytes, ours: bytes, fingerprint: str, key: str) -> bytes | None:
    """The record holding the blobs of both records of one entry, for a server that keeps
    the first record published (:mod:`.remote`); None when `theirs` has every blob of
    `ours`, or either is not a cacheable entry (nothing to add then).

    An entry's blobs are per numba signature (one kernel's overloads and what goes with
    each) or the same for every signature, so any two records of one key are valid
    parts of one; where both hold a blob, ours is kept, as this process loads it.
    Raises :class:`CorruptEntry` if either record is damaged.
    """
    stored, mine = decode(theirs, fingerprint, key), decode(ours, fingerprint, key)
    if not (stored.cacheable and mine.cacheable) or mine.blobs.keys() <= stored.blobs.keys():
        return None
    mine.blobs = stored.blobs | mine.blobs
    return encode(mine)


def _stored_form(data: bytes) -> tuple[str, bytes]:
    compressed = zlib.compress(data, _COMPRESSION_LEVEL)
    return ("zlib", compressed) if len(compressed) < len(data) else ("raw", data)


def decode(record: bytes, fingerprint: str, key: str,
           blobs_wanted: Container[str] | None = None) -> Entry:
    """The entry stored in `record`, which must be the record of (`fingerprint`, `key`).

    Raises :class:`CorruptEntry` if anything is off: magic, lengths, checksums, JSON,
    field types, or a record that belongs to another key or fingerprint. With
    `blobs_wanted`, the entry holds only those blobs; the others are checked
    against their checksums but not inflated (``verify`` reads every record: the
    checksum covers every stored byte, inflating would only check the writer).
    """
    if len(record) < _HEADER_SIZE or not record.startswith((MAGIC, _FORMAT_2_MAGIC)):
        raise CorruptEntry("not a numba_cache record (bad magic or too short)")
    format_2 = record.startswith(_FORMAT_2_MAGIC)
    (text_size,) = _LENGTH.unpack_from(record, len(MAGIC))
    blobs_start = _HEADER_SIZE + text_size
    if blobs_start > len(record):
        raise CorruptEntry("truncated metadata")
    text = record[_HEADER_SIZE:blobs_start]
    if hashlib.sha256(text).digest() != record[_HEADER_SIZE - _DIGEST_SIZE : _HEADER_SIZE]:
        raise CorruptEntry("the metadata fails its checksum")
    try:
        metadata = json.loads(text.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CorruptEntry(f"unreadable metadata: {error}") from None
    _check_metadata(metadata, format_2)
    if metadata["key"] != key or metadata["fingerprint"] != fingerprint:
        raise CorruptEntry("record belongs to another key or fingerprint")
    blobs = _read_blobs(record, blobs_start, metadata["blobs"], blobs_wanted)
    if not metadata["cacheable"] and (metadata["blobs"] or not metadata["reason"]):
        raise CorruptEntry("uncacheable marker with blobs or without a reason")
    return Entry(
        key=key,
        fingerprint=fingerprint,
        kind=metadata["kind"],
        summary=metadata["summary"],
        components=metadata["components"],
        cacheable=metadata["cacheable"],
        reason=metadata["reason"],
        created=metadata["created"],
        tool_version=metadata["tool_version"],
        blobs=blobs,
    )


_FIELD_TYPES = {
    "key": str,
    "fingerprint": str,
    "kind": str,
    "summary": str,
    "components": dict,
    "cacheable": bool,
    "reason": (str, type(None)),
    "created": (int, float),
    "tool_version": str,
    "blobs": list,
}


def _check_metadata(metadata: object, format_2: bool = False) -> None:
    if not isinstance(metadata, dict):
        raise CorruptEntry("metadata is not a JSON object")
    for name, expected in _FIELD_TYPES.items():
        # A missing "reason" is not a null one: `get` would pass it, and decoding fail.
        if name not in metadata or not isinstance(metadata[name], expected):
            raise CorruptEntry(f"metadata field {name!r} is missing or has the wrong type")
    if metadata["kind"] not in KINDS:
        raise CorruptEntry(f"unknown kind {metadata['kind']!r}")
    for blob in metadata["blobs"]:
        if not (
            isinstance(blob, dict)
            and isinstance(blob.get("name"), str)
            and isinstance(blob.get("size"), int)
            and blob["size"] >= 0
            and isinstance(blob.get("sha256"), str)
        ):
            raise CorruptEntry("malformed blob description")
        if format_2:
            # A format-3 record whose magic lost a bit must not read as raw blobs.
            if "encoding" in blob or "decoded_size" in blob:
                raise CorruptEntry("blob encodings in a format 2 record")
            blob.update(encoding="raw", decoded_size=blob["size"])
        if blob.get("encoding") not in ("raw", "zlib") or not isinstance(
            blob.get("decoded_size"), int
        ):
            raise CorruptEntry("blob description without a known encoding and decoded size")


def _read_blobs(record: bytes, start: int, descriptions: list[dict],
                wanted: Container[str] | None) -> dict[str, bytes]:
    blobs = {}
    seen = set()
    view = memoryview(record)
    for description in descriptions:
        end = start + description["size"]
        if end > len(record):
            raise CorruptEntry(f"blob {description['name']!r} is truncated")
        data = bytes(view[start:end])
        if hashlib.sha256(data).hexdigest() != description["sha256"]:
            raise CorruptEntry(f"blob {description['name']!r} fails its checksum")
        if description["name"] in seen:
            raise CorruptEntry(f"blob {description['name']!r} appears twice")
        seen.add(description["name"])
        if wanted is None or description["name"] in wanted:
            blobs[description["name"]] = _decoded(data, description)
        start = end
    if start != len(record):
        raise CorruptEntry("trailing bytes after the last blob")
    return blobs


def _decoded(data: bytes, description: dict) -> bytes:
    if description["encoding"] == "zlib":
        try:
            data = zlib.decompress(data)
        except zlib.error as error:
            raise CorruptEntry(f"blob {description['name']!r} does not decompress: {error}") from None
    if len(data) != description["decoded_size"]:
        raise CorruptEntry(f"blob {description['name']!r} decodes to the wrong size")
    return data
