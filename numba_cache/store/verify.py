"""A full check of a local store, and its repair: the slow path behind ``Store.verify``."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from .entry_layout import SOURCE_BLOB
from .index import Index
from .local import LocalBackend
from .record import CorruptEntry, decode
from .references import References, reads_blob


class _BlobsCheckedDecoded:
    """What verify inflates: what references read, and the source its .py copy must equal."""

    def __contains__(self, name: str) -> bool:
        return name == SOURCE_BLOB or reads_blob(name)


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a store.

    ``fingerprint`` and ``key`` name the entry concerned, ``path`` the file when the
    problem is a file that belongs to no entry (or to a dead writer). A `dangling`
    reference (see :mod:`.references`) is reported, but nothing is wrong: it costs
    a compile when used, and repair leaves it.
    """

    problem: str
    fingerprint: str | None = None
    key: str | None = None
    path: Path | None = None
    dangling: bool = False


def verify(backend: LocalBackend, index: Index, *, repair: bool) -> list[Problem]:
    """Decode every record, compare source copies and index rows with the files.

    Finds unreadable records, ``.py`` copies that differ from their record's
    "source" blob, ``.py`` copies without a record, PyTensor's generated source files
    whose content is not what their name says, temp files of dead writers, a
    temp directory, fingerprint directory or shard directory that is not one (every
    write there would fail), index rows without a
    file and files without a row, and entries whose references to others cannot be
    honoured (see :mod:`.references`); lists dangling references last. With
    `repair`, deletes unreadable entries and those whose references cannot be
    honoured, orphans, damaged generated source, stale temp files and files where
    the store's directories should be, rewrites wrong copies and brings the index in
    line with the files.
    """
    problems: list[Problem] = []
    references = References()
    indexed = index.rows()
    if indexed is None and index.path.exists():
        problems.append(Problem("the index is not usable", path=index.path))
    rows = {(entry.fingerprint, entry.key) for entry in indexed or ()}
    on_disk = set()
    for fingerprint, key, size, mtime in backend.list():
        on_disk.add((fingerprint, key))
        try:
            data = backend.get(fingerprint, key)
            if data is None:  # removed since it was listed
                continue
            entry = decode(data, fingerprint, key, _BlobsCheckedDecoded())
        except (CorruptEntry, OSError) as error:
            problems.append(Problem(f"unreadable record: {error}", fingerprint, key))
            if repair:
                backend.remove(fingerprint, key)
                index.drop([(fingerprint, key)])
            continue
        broken = references.add(entry)
        if broken is not None:
            problems.append(Problem(f"broken reference: {broken}", fingerprint, key))
            if repair:
                backend.remove(fingerprint, key)
                index.drop([(fingerprint, key)])
            continue
        source = entry.blobs.get(SOURCE_BLOB)
        copy = backend.read_source(fingerprint, key)
        if source is not None and copy is not None and copy != source:
            problem = "the .py copy differs from the record's source"
            problems.append(Problem(problem, fingerprint, key))
            if repair:
                backend.put(fingerprint, key, data, source.decode(errors="replace"))
        if indexed is not None and (fingerprint, key) not in rows:
            problems.append(Problem("entry missing from the index", fingerprint, key))
            if repair:
                index.insert(entry, size, mtime)
    for reference, wrong in references.wrong_kinds():
        problems.append(Problem(f"broken reference: {wrong}", reference.fingerprint, reference.key))
        if repair:
            backend.remove(reference.fingerprint, reference.key)
            index.drop([(reference.fingerprint, reference.key)])
    stale_rows = sorted(rows - on_disk)
    problems.extend(Problem("index row without an entry file", *address) for address in stale_rows)
    if repair:
        index.drop(stale_rows)
    for fingerprint, key, path in backend.orphan_sources():
        problems.append(Problem("source copy without a record", fingerprint, key, path))
        if repair:
            path.unlink(missing_ok=True)
    for path in backend.misnamed_generated_sources():
        problems.append(Problem("generated source that is not what its name's digest says",
                                path=path))
        if repair:  # PyTensor writes it again when it next generates that source
            path.unlink(missing_ok=True)
    for path in backend.files_in_place_of_directories():
        problems.append(Problem("a file where the store keeps a directory", path=path))
        if repair:
            path.unlink(missing_ok=True)
    temp_dir = backend.temp_dir
    if temp_dir.exists() and not temp_dir.is_dir():
        problems.append(Problem("the temporary directory is not a directory", path=temp_dir))
        if repair:
            temp_dir.unlink()
    for path in backend.stale_temp_files():
        problems.append(Problem("temp file of a dead or stuck writer", path=path))
        if repair:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    problems.extend(
        Problem(f"dangling reference: {reference.describe()}", reference.fingerprint,
                reference.key, dangling=True)
        for reference in references.dangling()
    )
    return problems
