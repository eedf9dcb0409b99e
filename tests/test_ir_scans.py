"""The scans of a kernel's LLVM IR find what their plain patterns find.

The baked-address scan and the object-mode block scan search megabytes of IR per
large graph kernel, so each searches from a literal and checks what comes before it
in Python (:mod:`numba_cache.kernels.outcomes.uncacheable`,
:mod:`numba_cache.kernels.runtime.blocks`). These tests hold them to the patterns
they stand for, on text built to put matches, near misses and overlaps side by side.
"""

from __future__ import annotations

import random
import re
import uuid

from numba_cache.kernels.outcomes import uncacheable
from numba_cache.kernels.runtime import blocks

#: The patterns the scans stand for, as ``re`` reads them.
INTEGER = re.compile(r"\bi64 (-?\d{7,20})\b")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

TEXTS = 20_000


def _text(rng: random.Random, pieces) -> str:
    return "".join(pieces(rng) for _ in range(rng.randint(0, 12)))


def _integer_pieces(rng: random.Random) -> str:
    return rng.choice(["i64 ", "i64 ", "xi64 ", "_i64 ", "\u00e9i64 ", " ", "-", "\n", ",",
                       str(rng.getrandbits(rng.randint(1, 64))), "9" * rng.randint(1, 22)])


def _uuid_pieces(rng: random.Random) -> str:
    whole = str(uuid.UUID(int=rng.getrandbits(128)))
    return rng.choice([whole, whole[rng.randint(0, 35):], whole[:rng.randint(1, 36)], "-",
                       rng.choice("0123456789abcdefg") * rng.randint(1, 12)])


def test_the_baked_address_scan_reads_the_integers_its_pattern_matches():
    rng = random.Random(0)
    matched = 0
    for _ in range(TEXTS):
        text = _text(rng, _integer_pieces)
        expected = [int(match.group(1)) & 0xFFFFFFFFFFFFFFFF for match in INTEGER.finditer(text)]
        assert list(uncacheable._pointer_sized_integers(text)) == expected, text
        matched += bool(expected)
    assert matched > TEXTS // 20  # the texts hold matches, not only misses


def test_the_block_scan_finds_the_uuids_its_pattern_finds():
    rng = random.Random(0)
    matched = 0
    for _ in range(TEXTS):
        text = _text(rng, _uuid_pieces)
        expected = UUID.findall(text)
        assert list(blocks._uuids(text)) == expected, text
        matched += bool(expected)
    assert matched > TEXTS // 4


def test_a_match_overlapping_the_one_before_is_not_found_twice():
    first = "0123abcd-0000-1111-2222-333344445555"
    text = first + "-6666-7777-8888-999999999999"  # a second rest, its first part in the first
    assert blocks.named_blocks(text) == UUID.findall(text) == [first]
    # No word boundary before the first "i64 ": not one of the pattern's integers.
    assert list(uncacheable._pointer_sized_integers("xi64 1400000000, i64 1400000001")) == [
        1400000001]
