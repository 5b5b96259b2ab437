"""The generated PNG fixtures: valid PNGs whose content is what the checks claim."""

from __future__ import annotations

import io
import zlib

import pytest

from sparkctl.qa import images


def test_png_round_trip_through_own_decoder() -> None:
    png = images.render([images.Shape("square", "red"), images.Shape("circle", "blue")], cell=64, margin=8)
    width, height, rows = images.decode_png(png)
    assert (width, height) == (128, 64)
    assert rows[0][:3] == bytes(images.WHITE)  # margin is background
    assert rows[32][3 * 32 : 3 * 32 + 3] == bytes(images.PALETTE["red"])  # centre of the first cell
    assert rows[32][3 * 96 : 3 * 96 + 3] == bytes(images.PALETTE["blue"])  # centre of the second


def test_png_is_read_by_an_independent_decoder() -> None:
    pil = pytest.importorskip("PIL.Image")
    fixture = images.one_image()
    img = pil.open(io.BytesIO(fixture.png))
    img.load()  # verifies the CRCs and the zlib stream
    assert img.mode == "RGB"
    assert img.size == (128 * 3, 128)
    assert img.getpixel((64, 64)) == images.PALETTE["red"]
    assert img.getpixel((128 + 64, 64)) == images.PALETTE["blue"]
    assert img.getpixel((256 + 64, 64)) == images.PALETTE["yellow"]


def test_every_row_uses_filter_zero() -> None:
    png = images.render([images.Shape("circle", "green")], cell=32, margin=4)
    # IDAT follows the 8-byte signature and the 25-byte IHDR chunk
    length = int.from_bytes(png[33:37], "big")
    raw = zlib.decompress(png[41 : 41 + length])
    stride = 32 * 3 + 1
    assert [raw[y * stride] for y in range(32)] == [0] * 32


def test_fixtures_say_what_they_draw() -> None:
    one = images.one_image()
    assert images.colours_left_to_right(one.png) == one.colours == ["red", "blue", "yellow"]
    four = images.four_images()
    assert len(four) == 4
    assert [images.colours_left_to_right(f.png) for f in four] == [
        [c] for c in ["green", "orange", "purple", "black"]
    ]
    assert one.data_url().startswith("data:image/png;base64,iVBOR")


def test_fixtures_are_stable() -> None:
    assert images.one_image().png == images.one_image().png


def test_unknown_colour_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown colour 'teal'"):
        images.render([images.Shape("square", "teal")])


def test_simulator_sees_the_same_shapes() -> None:
    sim = pytest.importorskip("sparkctl_sim.images")
    info = sim.analyse(images.one_image().data_url(), 1)
    assert [s.colour for s in info.shapes] == ["red", "blue", "yellow"]
    assert [s.kind for s in info.shapes] == ["square", "circle", "square"]
    for fixture in images.four_images():
        assert [s.colour for s in sim.analyse(fixture.data_url(), 1).shapes] == fixture.colours
