"""The local-directory backend: one record file per entry, written atomically.

Layout under the root::

    tmp/<name>.<pid>.<random>.tmp                  in-flight writes
    <fingerprint>/<key[:2]>/<key>.nbk              the record (authoritative)
    <fingerprint>/<key[:2]>/<key>.py               a readable copy of the source
    <fingerprint>/fingerprint.json                 the fingerprint's components
    <fingerprint>/generated_src/m<sha256>.py       source PyTensor generates (its own files)

A write goes to a temp file in ``tmp/``, is fsync'ed, then renamed over its
target, so a crash at any point leaves the old file or the complete new one.
The ``.py`` is written after the ``.nbk``, and a failure to write it does not
fail the entry: it is a copy for people, so a crash in between leaves at worst a
record without its copy, never a copy that belongs to no record. Temp files name
their writer's pid so that a later process can tell the leftovers of a crashed
writer from a write in flight.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from . import checkpoints
from .entry import is_sha256_hex
from .notices import warn_once

#: Where PyTensor writes the source it generates, each file named by the sha256 of its
#: content (``config.generated_src_dir``; :mod:`numba_cache.kernels.assembly.conversion`).
GENERATED_SOURCE_DIR = "generated_src"
#: The name of one of those files: ``m`` and the sha256 of its content.
GENERATED_SOURCE_FILE = re.compile(r"m([0-9a-f]{64})\.py")
RECORD_SUFFIX = ".nbk"
SOURCE_SUFFIX = ".py"
TEMP_SUFFIX = ".tmp"
#: A temp file older than this is stale even if a process with its writer's pid runs:
#: pids are reused, and a writer on another host sharing the directory is invisible.
TEMP_MAX_AGE = 3600.0


def make_private_dirs(path: Path) -> None:
    """Create `path` and its missing parents with mode 0o700.

    ``os.makedirs(mode=...)`` applies the mode to the leaf only; the cache holds
    pickles, so every directory this creates is private to its owner.
    """
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)


class LocalBackend:
    """Entries as files under `root` (see the module docstring for the layout)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.temp_dir = self.root / "tmp"

    def record_path(self, fingerprint: str, key: str) -> Path:
        return self.root / fingerprint / key[:2] / f"{key}{RECORD_SUFFIX}"

    def source_path(self, fingerprint: str, key: str) -> Path:
        return self.root / fingerprint / key[:2] / f"{key}{SOURCE_SUFFIX}"

    def get(self, fingerprint: str, key: str) -> bytes | None:
        # One open and one read: an eviction that unlinks the file meanwhile leaves
        # this reader with the complete old inode.
        try:
            return _read_whole(self.record_path(fingerprint, key))
        except (FileNotFoundError, NotADirectoryError):  # no such file, nor could there be
            return None

    def has(self, fingerprint: str, key: str) -> bool:
        return self.record_path(fingerprint, key).is_file()

    def read_source(self, fingerprint: str, key: str) -> bytes | None:
        """The bytes of the entry's ``.py`` copy, or None if it has none."""
        try:
            return _read_whole(self.source_path(fingerprint, key))
        except FileNotFoundError:
            return None

    def put(self, fingerprint: str, key: str, record: bytes, source: str | None) -> None:
        checkpoints.reached("before-temp-write")
        make_private_dirs(self.root)
        target = self.record_path(fingerprint, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        self._write_atomically(target, record, checkpoints.reached)
        checkpoints.reached("after-rename")
        if source is not None:
            with contextlib.suppress(OSError):
                self._write_atomically(self.source_path(fingerprint, key), source.encode(),
                                       durable=False)

    def put_file(self, path: Path, data: bytes) -> None:
        """Write `data` to `path`, a file under the root beside the entries, atomically."""
        make_private_dirs(self.root)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._write_atomically(path, data)

    def remove(self, fingerprint: str, key: str) -> None:
        # Record first: a source copy without its record is a harmless orphan,
        # the reverse would be an entry whose copy silently vanished.
        for path in (self.record_path(fingerprint, key), self.source_path(fingerprint, key)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def list(self, fingerprint: str | None = None) -> Iterator[tuple[str, str, int, float]]:
        """``(fingerprint, key, size, mtime)`` of every record; size includes its ``.py`` copy."""
        for fingerprint_, shard, files in self._shards(fingerprint):
            for key, name in _keyed(files, shard, RECORD_SUFFIX):
                try:
                    stat = files[name].stat()
                except FileNotFoundError:
                    continue
                size = stat.st_size + _size(files.get(key + SOURCE_SUFFIX))
                yield fingerprint_, key, size, stat.st_mtime

    def orphan_sources(self) -> Iterator[tuple[str, str, Path]]:
        """Yield ``(fingerprint, key, path)`` of ``.py`` copies that have no record."""
        for fingerprint, shard, files in self._shards():
            for key, name in _keyed(files, shard, SOURCE_SUFFIX):
                if key + RECORD_SUFFIX not in files:
                    yield fingerprint, key, Path(files[name].path)

    def misnamed_generated_sources(self) -> Iterator[Path]:
        """PyTensor's generated source files whose content is not the one their name is the
        digest of. PyTensor reuses a file of the right size without reading it: a damaged
        one would stay, and be read back for tracebacks."""
        for fingerprint in filter(is_sha256_hex, _subdirectories(self.root)):
            directory = self.root / fingerprint / GENERATED_SOURCE_DIR
            for name in _names(directory):
                named = GENERATED_SOURCE_FILE.fullmatch(name)
                if named is None:
                    continue
                with contextlib.suppress(OSError):  # removed meanwhile: nothing to check
                    if hashlib.sha256((directory / name).read_bytes()).hexdigest() != named[1]:
                        yield directory / name

    def files_in_place_of_directories(self) -> Iterator[Path]:
        """Files where the store keeps a directory, a fingerprint's or a shard's: every
        write of an entry there fails."""
        for fingerprint in filter(is_sha256_hex, _names(self.root)):
            path = self.root / fingerprint
            if not os.path.isdir(path):
                yield path
                continue
            for shard in _names(path):
                if _SHARD.fullmatch(shard) and not os.path.isdir(path / shard):
                    yield path / shard

    def stale_temp_files(self) -> list[Path]:
        """Temp files left by writers that died (or that are older than an hour)."""
        try:
            names = os.listdir(self.temp_dir)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [
            self.temp_dir / name
            for name in names
            if name.endswith(TEMP_SUFFIX) and self._is_stale(self.temp_dir / name)
        ]

    def clean_temp(self) -> int:
        """Remove the stale temp files; return how many were removed."""
        removed = 0
        for path in self.stale_temp_files():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed += 1
        return removed

    def _write_atomically(
        self, target: Path, data: bytes, step: Callable[[str], None] = lambda name: None,
        durable: bool = True,
    ) -> None:
        """Write `data` to a temp file, fsync it, rename it to `target`; `step` names each step.

        Without `durable` the fsync is skipped: for the readable source copies, which
        nothing loads, it was a third of the store's cost on a cold compile.
        """
        self.temp_dir.mkdir(exist_ok=True)
        temp = self.temp_dir / f"{target.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
        # Mode 0o666 lets the umask decide, as for any file; the root's 0o700 is the gate.
        descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        try:
            with os.fdopen(descriptor, "wb") as file:
                file.write(data)
                file.flush()
                step("after-temp-write")
                if durable:
                    os.fsync(file.fileno())
            step("before-rename")
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise

    def _shards(self, fingerprint: str | None = None) -> Iterator[tuple[str, str, dict]]:
        """``(fingerprint, shard, {name: DirEntry})`` of every shard directory, one scan each.

        A scan gives a shard's records and their copies together: on a store of
        10,000 entries, a path object and a stat per file cost more than the system calls.
        """
        fingerprints = [fingerprint] if fingerprint else _subdirectories(self.root)
        for fingerprint_ in fingerprints:
            if not is_sha256_hex(fingerprint_):
                continue
            directory = os.path.join(self.root, fingerprint_)
            for shard in _subdirectories(directory):
                if len(shard) == 2:
                    yield fingerprint_, shard, _scan(os.path.join(directory, shard))

    @staticmethod
    def _is_stale(temp: Path) -> bool:
        try:
            age = time.time() - temp.stat().st_mtime
        except FileNotFoundError:
            return False
        if age > TEMP_MAX_AGE:
            return True
        parts = temp.name.split(".")
        writer = parts[-3] if len(parts) >= 3 else ""
        return not (writer.isdigit() and _process_exists(int(writer)))


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    return True


_SHARD = re.compile(r"[0-9a-f]{2}")


def _names(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _subdirectories(path: Path) -> list[str]:
    try:
        with os.scandir(path) as entries:
            return [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _read_whole(path: Path) -> bytes:
    """The file's bytes, through one descriptor: no buffered file object (verify reads 20,000)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(descriptor).st_size
        chunks = [os.read(descriptor, max(size, 1))]
        while chunks[-1]:  # a file that grew since fstat, or a short read
            chunks.append(os.read(descriptor, 1 << 20))
        return b"".join(chunks)
    finally:
        os.close(descriptor)


def _scan(directory: str) -> dict[str, os.DirEntry]:
    try:
        with os.scandir(directory) as entries:
            return {entry.name: entry for entry in entries}
    except (FileNotFoundError, NotADirectoryError):
        return {}


def _size(file: os.DirEntry | None) -> int:
    if file is None:
        return 0
    try:
        return file.stat().st_size
    except FileNotFoundError:
        return 0


def _keyed(files: dict, shard: str, suffix: str) -> Iterator[tuple[str, str]]:
    """``(key, file name)`` of the entry files of a shard ending in `suffix`, in key order."""
    for name in sorted(files):
        key = name.removesuffix(suffix)
        if name.endswith(suffix) and key.startswith(shard) and is_sha256_hex(key):
            yield key, name


def unusable_root(root: Path) -> str | None:
    """Why `root` can be no store's directory, whatever the permissions, or None: what
    it is, completing "`root` is ...".

    It is a file (not a directory), lies below one, or is (or lies below) a
    symbolic link to nothing, which a store cannot be created through.
    """
    # os.path's tests, unlike Path's, are False (not PermissionError) below a
    # directory this process may not search.
    path = root
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    if os.path.islink(path) and not os.path.exists(path):
        link = f"a symbolic link to {os.readlink(path)}, which does not exist"
        return link if path == root else f"below {path}, {link}"
    if os.path.exists(path) and not os.path.isdir(path):
        return "not a directory" if path == root else f"below {path}, which is not a directory"
    return None


def may_write_under(root: Path) -> bool:
    """Whether `root` is a directory this process may write, or may create."""
    if unusable_root(root) is not None:
        return False
    existing = root
    while not os.path.exists(existing):
        existing = existing.parent
    return os.access(existing, os.W_OK | os.X_OK)


def warn_if_writable_by_others(root: Path) -> None:
    try:
        mode = root.stat().st_mode
    except OSError:
        return
    if stat.S_ISDIR(mode) and mode & (stat.S_IWGRP | stat.S_IWOTH):
        warn_once(
            ("permissions", str(root)),
            f"numba_cache: the cache directory {root} is writable by other users. Its entries "
            "are pickles, so whoever can write there can run code in your processes; "
            f"use a private directory (chmod 700 {root}).",
        )


def stored_size(data: bytes, source: str | None) -> int:
    """What an entry occupies: its record and its ``.py`` copy."""
    return len(data) + (len(source.encode()) if source is not None else 0)
