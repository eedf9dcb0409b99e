"""Portable caches: the entries of a store in one archive, and their import elsewhere.

An archive is a gzip-compressed tar file::

    entries/<fingerprint>/<key>.nbk     a record, byte for byte as the store holds it
    entries/<fingerprint>/<key>.py      its readable source copy, when it has one
    manifest.json                       written after the entries
    manifest.sig                        its signature, where a shared secret is set

The manifest names the archive's format, the numba_cache version that made it,
when, the exporting environment's fingerprint, the components of every
fingerprint it holds, and each entry with the size and SHA-256 of its files.

Import reads the archive twice. The first pass reads it to the end (so a
truncated archive is refused before anything is written), checksums every file
and reads the manifest; the second imports the entries that passed, checking
each file's checksum again and decoding each record (:func:`record.decode`
checks its own checksums) before :meth:`Store.add_record` writes it under the
entry's lock. So nothing that fails a check reaches the store, an entry already
readable in the store is never replaced, and other processes may use the store
meanwhile. Only entries of this environment's fingerprint are imported; the
others are reported as skipped, with the components that differ.

The checksums catch damage, not malice: records are pickles. Where a shared secret
is set, export signs the manifest and import refuses an archive whose signature is
missing or wrong (:mod:`.signature`); without one, import only archives you made or
trust, as you would a Python package.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import secrets
import tarfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from numba_cache import versions
from numba_cache.keys import Fingerprint
from numba_cache.keys.components import DIGEST_DIGITS, changed_components
from numba_cache.portable import signature
from numba_cache.store import CorruptEntry, Store
from numba_cache.store.entry import is_sha256_hex
from numba_cache.store.record import TOOL_VERSION

FORMAT = "numba_cache archive"
MANIFEST_NAME = "manifest.json"
ENTRIES_DIR = "entries"
#: A manifest larger than this is not one numba_cache wrote (about 300 bytes an entry).
MANIFEST_MAX_SIZE = 256 * 1024**2
_READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError, UnicodeDecodeError)


class ArchiveError(Exception):
    """The archive cannot be used at all (missing, truncated, not ours); nothing was imported."""


@dataclass
class ExportReport:
    path: Path
    entries: int = 0
    bytes: int = 0
    fingerprints: list[str] = field(default_factory=list)
    #: (fingerprint, key, why) of entries left out because they are unreadable.
    unreadable: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass
class Outcome:
    """What import did with one entry of the manifest: ``imported``, ``present`` (the
    store already had it), ``other-fingerprint`` or ``damaged``, and why."""

    fingerprint: str
    key: str
    kind: str
    summary: str
    result: str
    reason: str = ""


@dataclass
class ImportReport:
    manifest: dict
    outcomes: list[Outcome]

    def count(self, result: str) -> int:
        return sum(outcome.result == result for outcome in self.outcomes)


def export(
    store: Store, path: Path, fingerprints: list[str], components: dict[str, dict | None],
    current: str, progress: Callable[[int, int], None] = lambda done, total: None,
    secret: bytes | None = None,
) -> ExportReport:
    """Write the entries of `fingerprints` to the archive `path`, atomically.

    `components` gives each fingerprint's components for the manifest, `current`
    is the exporting environment's fingerprint; with a `secret`, the manifest is
    signed (:mod:`.signature`). Unreadable entries are left out and reported. The
    archive is written beside `path` and renamed onto it, so a failed export leaves
    no partial archive.
    """
    path = Path(path)
    chosen = [entry for entry in store.entries() if entry.fingerprint in fingerprints]
    report = ExportReport(path, fingerprints=sorted(fingerprints))
    listed = []
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with tarfile.open(temp, "w:gz") as archive:
            for done, entry in enumerate(chosen):
                progress(done, len(chosen))
                try:
                    found = store.record_of(entry.fingerprint, entry.key)
                except (CorruptEntry, OSError) as error:
                    report.unreadable.append((entry.fingerprint, entry.key, str(error)))
                    continue
                if found is None:  # evicted since it was listed
                    continue
                data, source = found
                files = {"record": _add(archive, _member(entry.fingerprint, entry.key, ".nbk"), data)}
                if source is not None:
                    files["source"] = _add(archive, _member(entry.fingerprint, entry.key, ".py"), source)
                listed.append({
                    "fingerprint": entry.fingerprint, "key": entry.key, "kind": entry.kind,
                    "summary": entry.summary, "cacheable": entry.cacheable, **files,
                })
                report.entries += 1
                report.bytes += len(data) + len(source or b"")
            progress(len(chosen), len(chosen))
            manifest = {
                "format": FORMAT,
                "format_version": versions.ARCHIVE,
                "tool_version": TOOL_VERSION,
                "created": time.time(),
                "exported_from": current,
                "fingerprints": {fingerprint: components.get(fingerprint) for fingerprint in fingerprints},
                "entries": listed,
            }
            manifest_bytes = json.dumps(manifest, indent=1, sort_keys=True).encode()
            _add(archive, MANIFEST_NAME, manifest_bytes)
            if secret is not None:
                _add(archive, signature.NAME, signature.sign(secret, manifest_bytes))
        os.replace(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    return report


def import_archive(
    store: Store, path: Path, current: Fingerprint,
    progress: Callable[[int, int], None] = lambda done, total: None,
    secret: bytes | None = None,
) -> ImportReport:
    """Import the entries of the archive `path` that are intact and of fingerprint `current`;
    with a `secret`, only if the archive is signed with it (:mod:`.signature`).

    Raises :class:`ArchiveError` when the archive as a whole cannot be used.
    """
    path = Path(path)
    digests, manifest = _check_pass(path, secret)
    outcomes, wanted = [], {}
    for item in manifest["entries"]:
        outcome = Outcome(item["fingerprint"], item["key"], item["kind"], item["summary"], "")
        outcomes.append(outcome)
        why_damaged = _damage(item, digests)
        if why_damaged:
            outcome.result, outcome.reason = "damaged", why_damaged
        elif item["fingerprint"] != current.digest:
            outcome.result = "other-fingerprint"
            outcome.reason = _other_fingerprint(item["fingerprint"], manifest, current)
        else:
            wanted[_member(item["fingerprint"], item["key"], ".nbk")] = (item, outcome)
    if wanted:
        _check_numba(store, current, vouched=bool(manifest["fingerprints"].get(current.digest)))
    for done, (name, data, source) in enumerate(_wanted_files(path, wanted)):
        progress(done, len(wanted))
        item, outcome = wanted[name]
        if _sha256(data) != item["record"]["sha256"] or (
            source is not None and _sha256(source) != item["source"]["sha256"]
        ):
            outcome.result, outcome.reason = "damaged", "the archive changed while it was imported"
            continue
        try:
            text = None if source is None else source.decode()
            added = store.add_record(item["fingerprint"], item["key"], data, text)
        except (CorruptEntry, UnicodeDecodeError) as error:
            outcome.result, outcome.reason = "damaged", f"not a valid record: {error}"
            continue
        outcome.result = "imported" if added else "present"
    progress(len(wanted), len(wanted))
    for _, outcome in wanted.values():
        if not outcome.result:  # listed and checked in the first pass, gone in the second
            outcome.result, outcome.reason = "damaged", "the archive changed while it was imported"
    return ImportReport(manifest, outcomes)


def _check_numba(store: Store, current: Fingerprint, vouched: bool) -> None:
    """Check the upstream seams here, as the first compile in a new store would, and record
    the fingerprint that marks it done: imported kernels are then loaded by processes
    that compile nothing at all.

    An archive holding this fingerprint's entries and components (`vouched`) comes
    from a store where the self-test passed for it, so the checks that compile (a
    tiny kernel's round trip) are left out, as a vouch on the shared tier does
    (:mod:`numba_cache.store.tier_notes`); the others run.
    """
    if store.fingerprint_components(current.digest) is not None:
        return
    from numba_cache import _compat  # imports numba and PyTensor: only on import
    from numba_cache.kernels import probes

    found = _compat.problems(_compat.all_seams() + ([] if vouched else probes.PROBES))
    if found:
        raise ArchiveError(f"numba_cache cannot work in this environment ({'; '.join(found)}); "
                           "nothing imported")
    store.record_fingerprint(current.digest, current.components)


def _member(fingerprint: str, key: str, suffix: str) -> str:
    return f"{ENTRIES_DIR}/{fingerprint}/{key}{suffix}"


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> dict:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
    archive.addfile(info, io.BytesIO(data))
    return {"size": len(data), "sha256": _sha256(data)}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _members(path: Path) -> Iterator[tuple[str, bytes]]:
    """``(name, content)`` of each regular file of the archive, streamed in order."""
    try:
        with tarfile.open(path, "r|*") as archive:
            for member in archive:
                if not member.isfile():
                    continue
                if member.name == MANIFEST_NAME and member.size > MANIFEST_MAX_SIZE:
                    raise ArchiveError(f"{path}: its manifest is {member.size} bytes, not a numba_cache archive")
                yield member.name, archive.extractfile(member).read()
    except FileNotFoundError:
        raise ArchiveError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise ArchiveError(f"{path} is a directory, not an archive") from None
    except _READ_ERRORS as error:
        raise ArchiveError(
            f"cannot read {path} ({type(error).__name__}: {error}): truncated, damaged or "
            "not a numba_cache archive; nothing imported"
        ) from None


def _check_pass(path: Path, secret: bytes | None) -> tuple[dict[str, tuple[int, str]], dict]:
    """Read the whole archive: each file's size and SHA-256 by name, and the checked manifest,
    its signature checked first when there is a `secret`."""
    digests, manifest_bytes, signed = {}, None, None
    for name, data in _members(path):
        if name == MANIFEST_NAME:
            manifest_bytes = data
        elif name == signature.NAME:
            signed = data
        else:
            digests[name] = (len(data), _sha256(data))
    if manifest_bytes is None:
        raise ArchiveError(f"{path} has no {MANIFEST_NAME}: not a numba_cache archive; nothing imported")
    if secret is not None:
        try:
            signature.check(secret, manifest_bytes, signed, str(path))
        except signature.SignatureError as problem:
            raise ArchiveError(str(problem)) from None
    return digests, _manifest(path, manifest_bytes)


def _manifest(path: Path, data: bytes) -> dict:
    try:
        manifest = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as error:
        raise ArchiveError(f"{path}: unreadable {MANIFEST_NAME} ({error}); nothing imported") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArchiveError(f"{path}: {MANIFEST_NAME} is not a numba_cache manifest; nothing imported")
    if manifest.get("format_version") != versions.ARCHIVE:
        raise ArchiveError(
            f"{path}: archive format version {manifest.get('format_version')!r}, this numba_cache "
            f"reads version {versions.ARCHIVE}; export it again with this version"
        )
    entries, fingerprints = manifest.get("entries"), manifest.get("fingerprints")
    if not isinstance(entries, list) or not isinstance(fingerprints, dict) or not all(
        _well_formed(item) for item in entries
    ):
        raise ArchiveError(f"{path}: malformed {MANIFEST_NAME}; nothing imported")
    return manifest


def _well_formed(item: object) -> bool:
    def file_description(value: object) -> bool:
        return (
            isinstance(value, dict) and isinstance(value.get("size"), int)
            and isinstance(value.get("sha256"), str)
        )

    return (
        isinstance(item, dict)
        and is_sha256_hex(str(item.get("fingerprint")))
        and is_sha256_hex(str(item.get("key")))
        and isinstance(item.get("kind"), str)
        and isinstance(item.get("summary"), str)
        and file_description(item.get("record"))
        and (item.get("source") is None or file_description(item["source"]))
    )


def _damage(item: dict, digests: dict[str, tuple[int, str]]) -> str:
    """Why the files of a manifest entry cannot be trusted, or "" if they match it."""
    for part, suffix in (("record", ".nbk"), ("source", ".py")):
        expected = item.get(part)
        if expected is None:
            continue
        found = digests.get(_member(item["fingerprint"], item["key"], suffix))
        if found is None:
            return f"its {part} is missing from the archive"
        if found != (expected["size"], expected["sha256"]):
            return f"its {part} fails its checksum (damaged or altered)"
    return ""


def _other_fingerprint(fingerprint: str, manifest: dict, current: Fingerprint) -> str:
    recorded = manifest["fingerprints"].get(fingerprint)
    prefix = f"fingerprint {fingerprint[:DIGEST_DIGITS]}, not this environment's {current.digest[:DIGEST_DIGITS]}"
    if not isinstance(recorded, dict):
        return prefix
    changed = changed_components(recorded, current.components)
    return f"{prefix}: {', '.join(changed)}" if changed else prefix


def _wanted_files(path: Path, wanted: dict) -> Iterator[tuple[str, bytes, bytes | None]]:
    """``(record name, record, source)`` of the wanted entries, read in a second pass; each
    as soon as its record and its source (when the manifest lists one) have been read."""
    pending: dict[str, dict[str, bytes]] = {}
    for name, data in _members(path):
        is_source = name.endswith(".py")
        record_name = name.removesuffix(".py") + ".nbk" if is_source else name
        if record_name not in wanted:
            continue
        parts = pending.setdefault(record_name, {})
        parts["source" if is_source else "record"] = data
        item = wanted[record_name][0]
        if "record" in parts and ("source" in parts or item.get("source") is None):
            del pending[record_name]
            yield record_name, parts["record"], parts.get("source")
