"""PyTensor's generated source files: one that is not its source is written again, nothing else.

numba_cache/kernels/assembly/generated_files.py; end to end (a damaged store whose kernels
must still be stored): tests/test_reliability_corruption.py.
"""

from __future__ import annotations

import hashlib
import linecache

from numba_cache.kernels.assembly.generated_files import restore_source_file

SOURCE = "def generated(x):\n    return x + 1\n"


def generated_function(path):
    """A function compiled from SOURCE under `path`, as PyTensor's compile_function_src makes it."""
    namespace = {}
    exec(compile(SOURCE, str(path), "exec"), namespace)
    function = namespace["generated"]
    function.__source__ = SOURCE
    return function


def test_a_damaged_file_named_by_its_sources_digest_is_written_again(tmp_path):
    path = tmp_path / f"m{hashlib.sha256(SOURCE.encode()).hexdigest()}.py"
    damaged = SOURCE.replace("(", '"').encode()
    path.write_bytes(damaged)
    function = generated_function(path)
    assert linecache.getlines(str(path))[0].startswith('def generated"')
    restore_source_file(function)
    assert path.read_bytes() == SOURCE.encode()
    assert "".join(linecache.getlines(str(path))) == SOURCE  # read again, not the damage
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left


def test_a_file_named_otherwise_or_a_function_without_its_source_is_left(tmp_path):
    other = tmp_path / f"m{'0' * 64}.py"  # content-addressed, but not by this source
    plain = tmp_path / "generated.py"
    for path in (other, plain):
        path.write_text("damaged")
        restore_source_file(generated_function(path))
        assert path.read_text() == "damaged"
    named = tmp_path / f"m{hashlib.sha256(SOURCE.encode()).hexdigest()}.py"
    named.write_text("damaged")
    without_source = generated_function(named)
    del without_source.__source__
    restore_source_file(without_source)
    assert named.read_text() == "damaged"
