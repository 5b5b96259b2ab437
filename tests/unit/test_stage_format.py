"""DSV41EN1 layout: row ranges, header, sizes, sampled rows — checked against the published figures."""

from __future__ import annotations

import itertools
import struct

import pytest

from sparkctl.stage import dsv41en1 as d

# Published P-R4 ranges and file sizes (seed-profiles §D.2).
L1_ROWS = 384_006_168
L14_ROWS = 384_016_682
PUBLISHED = {
    # rank: (L1 [lo, hi), L14 [lo, hi), L1 size, L14 size)
    0: ((0, 96_001_542), (0, 96_004_170), 25_344_411_184, 25_345_104_976),
    1: ((96_001_542, 192_003_084), (96_004_170, 192_008_341), 25_344_411_184, 25_345_105_240),
    2: ((192_003_084, 288_004_626), (192_008_341, 288_012_511), 25_344_411_184, 25_345_104_976),
    3: ((288_004_626, 384_006_168), (288_012_511, 384_016_682), 25_344_411_184, 25_345_105_240),
}


@pytest.mark.parametrize("rank", range(4))
def test_ranges_and_sizes_match_the_published_split(rank: int) -> None:
    l1, l14, s1, s14 = PUBLISHED[rank]
    assert d.row_range(L1_ROWS, rank, 4) == l1
    assert d.row_range(L14_ROWS, rank, 4) == l14
    assert d.packed_size(*l1) == s1
    assert d.packed_size(*l14) == s14


def test_per_rank_total_is_the_published_47_21_gib() -> None:
    lo1, hi1 = d.row_range(L1_ROWS, 0, 4)
    lo14, hi14 = d.row_range(L14_ROWS, 0, 4)
    total = d.packed_size(lo1, hi1) + d.packed_size(lo14, hi14)
    assert round(total / (1 << 30), 2) == 47.21


@pytest.mark.parametrize("rows,tp", [(0, 4), (1, 4), (3, 4), (5003, 4), (4999, 3), (10, 1), (97, 8)])
def test_ranges_tile_the_table_without_gaps(rows: int, tp: int) -> None:
    ranges = [d.row_range(rows, r, tp) for r in range(tp)]
    assert ranges[0][0] == 0 and ranges[-1][1] == rows
    for (_, hi), (lo, _) in itertools.pairwise(ranges):
        assert hi == lo


@pytest.mark.parametrize("rank,tp", [(4, 4), (-1, 4), (0, 0)])
def test_bad_rank_or_tp_is_rejected(rank: int, tp: int) -> None:
    with pytest.raises(ValueError):
        d.row_range(100, rank, tp)


def test_header_layout_is_6q_little_endian_padded_to_4096() -> None:
    raw = d.Header(14, 96_004_170, 192_008_341, L14_ROWS).pack()
    assert len(raw) == d.HEADER_BYTES == 4096
    assert struct.unpack_from("<6Q", raw) == (0x31344E4531565344, 14, 96_004_170, 192_008_341, L14_ROWS, 264)
    assert raw[:8] == b"DSV1EN41"
    assert raw[48:] == bytes(4096 - 48)
    assert d.Header.unpack(raw) == d.Header(14, 96_004_170, 192_008_341, L14_ROWS)


def test_header_rejects_bad_magic_row_size_and_range() -> None:
    good = bytearray(d.Header(1, 0, 10, 10).pack())
    bad_magic = bytearray(good)
    bad_magic[0] ^= 1
    with pytest.raises(d.FormatError, match="magic"):
        d.Header.unpack(bytes(bad_magic))
    bad_row = bytearray(good)
    struct.pack_into("<Q", bad_row, 40, 256)
    with pytest.raises(d.FormatError, match="row size"):
        d.Header.unpack(bytes(bad_row))
    bad_range = bytearray(good)
    struct.pack_into("<Q", bad_range, 16, 11)
    with pytest.raises(d.FormatError, match="range"):
        d.Header.unpack(bytes(bad_range))
    with pytest.raises(d.FormatError):
        d.Header.unpack(b"short")


def test_sampled_rows_are_boundaries_fixed_offsets_then_1024_seeded() -> None:
    lo, hi = d.row_range(L1_ROWS, 2, 4)
    rows = d.sample_rows(1, 2, lo, hi)
    assert len(rows) == d.SAMPLED_ROWS == 1037
    assert rows[:4] == [lo, lo + 1, hi - 2, hi - 1]
    assert rows[4:13] == [lo + k for k in (14, 15, 16, 30, 31, 32, 510, 511, 512)]
    assert all(lo <= r < hi for r in rows)
    assert rows == d.sample_rows(1, 2, lo, hi)  # deterministic (seed = layer*1000 + rank)
    assert rows[13:] != d.sample_rows(1, 3, lo, hi)[13:]  # another rank draws other rows


def test_sampled_rows_of_a_tiny_range_stay_inside_it() -> None:
    rows = d.sample_rows(14, 0, 5, 9)
    assert rows and all(5 <= r < 9 for r in rows)
    assert d.sample_rows(1, 0, 7, 7) == []


def test_names_carry_layer_rank_and_tp() -> None:
    assert d.shard_name(14, 3, 4) == "engram-l14-r3of4.bin"
    assert d.manifest_name(1, 4) == "manifest-r1of4.json"


def test_interleave_puts_each_scale_after_its_weight_row() -> None:
    n = 5000  # more than one interleave sub-block
    w = bytearray(bytes(range(256)) * n)
    for i in range(n):
        w[i * 256] = i % 256
    s = bytes((i + k) % 256 for i in range(n) for k in range(8))
    out = bytearray(n * 264)
    d.interleave(memoryview(bytes(w)), memoryview(s), memoryview(out), n)
    for i in (0, 1, 2047, 2048, 4999):
        assert out[i * 264 : i * 264 + 256] == w[i * 256 : (i + 1) * 256]
        assert out[i * 264 + 256 : (i + 1) * 264] == s[i * 8 : (i + 1) * 8]
