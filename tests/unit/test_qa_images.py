"""R4's vision probe images as sparkctl draws them: the published size, code, shapes, colours, order."""

from __future__ import annotations

import io
import zlib

import pytest

from sparkctl.qa import images, probedata
from sparkctl_sim import images as sim


def _pixels(png: bytes) -> tuple[int, int, list[list[tuple[int, int, int]]]]:
    return sim.decode_png(png)


def test_published_size_and_format() -> None:
    assert images.size() == (960, 640)  # the IHDR of the PNG R4 sent
    for fixture in [images.one_image(), *images.four_images()]:
        width, height, _ = _pixels(fixture.png)
        assert (width, height) == (960, 640)
        assert fixture.png[24:26] == bytes((8, 2))  # 8-bit RGB


def test_the_single_image_is_r4s_description() -> None:
    one = images.one_image()
    assert one.code == "NORTH 7314"
    assert [s.words for s in one.shapes] == ["red square", "blue circle"]
    _, _, rows = _pixels(one.png)
    (lx0, ly0, lx1, ly1), (rx0, ry0, rx1, ry1) = images.shape_boxes(2, 960)
    assert rows[(ly0 + ly1) // 2][(lx0 + lx1) // 2] == images.PALETTE["red"]  # left shape's centre
    assert rows[(ry0 + ry1) // 2][(rx0 + rx1) // 2] == images.PALETTE["blue"]  # right shape's centre
    assert lx1 < rx0  # left to right
    assert rows[ly0][lx0] == images.PALETTE["red"]  # a square fills its corner
    assert rows[ry0][rx0] == images.WHITE  # a circle does not


def test_the_four_images_carry_the_four_codes_in_order() -> None:
    four = images.four_images()
    assert [f.code for f in four] == ["NORTH 7314", "SOUTH 8265", "EAST 1948", "WEST 5620"]
    assert [f.number for f in four] == [1, 2, 3, 4]
    assert four[0].png == images.one_image().png  # R4 sends its image 1 in both checks


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_the_code_pixels_are_printed_glyph_by_glyph(number: int) -> None:
    fixture = images.fixture(number)
    _, _, rows = _pixels(fixture.png)
    x0, y0, x1, y1 = images.text_box(fixture.code, 960)
    assert y1 < images.SHAPE_TOP and 0 < x0 < x1 < 960  # at the top, above the shapes
    ink = images.PALETTE[images.TEXT_COLOUR]
    for i, ch in enumerate(fixture.code):
        for r, bits in enumerate(images.FONT[ch]):
            for c, bit in enumerate(bits):
                x = x0 + i * images.TEXT_ADVANCE + c * images.TEXT_SCALE + images.TEXT_SCALE // 2
                y = y0 + r * images.TEXT_SCALE + images.TEXT_SCALE // 2
                assert rows[y][x] == (ink if bit == "#" else images.WHITE), (ch, r, c)
    # nothing else is inked in the text band
    inked = {(x, y) for y in range(640) for x in range(960) if rows[y][x] != images.WHITE}
    assert all(x0 <= x < x1 and y0 <= y < y1 for x, y in inked if y < images.SHAPE_TOP)


def test_every_character_of_the_published_codes_has_a_glyph() -> None:
    codes = probedata.r4()["vision"]["four"]["expected"]
    assert all(ch in images.FONT for code in codes for ch in code)
    assert all(len(rows) == images.GLYPH_H and {len(r) for r in rows} == {images.GLYPH_W}
               for rows in images.FONT.values())
    with pytest.raises(ValueError, match="no glyph"):
        images.draw("north 7314", (), 960, 640)
    with pytest.raises(ValueError, match="does not fit"):
        images.draw("NORTH 7314", (), 320, 640)


def test_the_drawn_digests_are_pinned_in_the_probe_file() -> None:
    """The simulator recognises the probes by these digests: a drawing change must update the file."""
    assert probedata.r4()["vision"]["drawn"] == images.drawn_digests()
    assert images.one_image().png == images.one_image().png


def test_png_is_read_by_an_independent_decoder() -> None:
    pil = pytest.importorskip("PIL.Image")
    one = images.one_image()
    img = pil.open(io.BytesIO(one.png))
    img.load()  # verifies the CRCs and the zlib stream
    assert img.mode == "RGB" and img.size == (960, 640)
    (lx0, ly0, lx1, ly1), (rx0, ry0, rx1, ry1) = images.shape_boxes(2, 960)
    assert img.getpixel(((lx0 + lx1) // 2, (ly0 + ly1) // 2)) == images.PALETTE["red"]
    assert img.getpixel(((rx0 + rx1) // 2, (ry0 + ry1) // 2)) == images.PALETTE["blue"]


def test_every_row_uses_filter_zero() -> None:
    png = images.draw("AB", (images.Shape("circle", "green"),), 240, 480)
    length = int.from_bytes(png[33:37], "big")  # IDAT follows the signature and the 25-byte IHDR
    raw = zlib.decompress(png[41 : 41 + length])
    stride = 240 * 3 + 1
    assert [raw[y * stride] for y in range(480)] == [0] * 480


def test_shapes_are_parsed_from_the_published_words() -> None:
    assert images.Shape.parse("red square") == images.Shape("square", "red")
    with pytest.raises(ValueError, match="cannot draw 'green triangle'"):
        images.Shape.parse("green triangle")


def test_one_palette_for_drawing_and_naming() -> None:
    """The simulator names each drawn colour with exactly the RGB drawn for it."""
    assert {name: sim.COLOUR_NAMES[name] for name in images.PALETTE} == images.PALETTE
    assert all(sim.colour_name(rgb) == name for name, rgb in images.PALETTE.items())


def test_the_simulator_sees_the_code_and_the_shapes() -> None:
    info = sim.analyse(images.one_image().data_url(), 1)
    assert info.code == "NORTH 7314"
    assert [f"{s.colour} {s.kind}" for s in info.shapes] == ["red square", "blue circle"]
    assert [sim.analyse(f.data_url(), f.number).code for f in images.four_images()] == [
        "NORTH 7314", "SOUTH 8265", "EAST 1948", "WEST 5620",
    ]


def test_an_unknown_image_has_no_code_and_every_band_counts() -> None:
    png = images.draw("AB", (images.Shape("square", "green"), images.Shape("circle", "red")), 480, 480)
    info = sim.analyse(images.ImageFixture(0, "AB", (), png).data_url(), 1)
    assert info.code is None
    assert [s.colour for s in info.shapes][-2:] == ["green", "red"]
