"""The generated PNG fixtures: valid PNGs whose content is what the checks claim."""

from __future__ import annotations

import io
import zlib

import pytest

from sparkctl.qa import images
from sparkctl_sim import images as sim


def test_png_decoded_by_the_simulator() -> None:
    png = images.render([images.Shape("square", "red"), images.Shape("circle", "blue")], cell=64, margin=8)
    width, height, rows = sim.decode_png(png)
    assert (width, height) == (128, 64)
    assert rows[0][0] == images.WHITE  # margin is background
    assert rows[32][32] == images.PALETTE["red"]  # centre of the first cell
    assert rows[32][96] == images.PALETTE["blue"]  # centre of the second


def test_one_palette_for_drawing_and_naming() -> None:
    """The simulator names each drawn colour with exactly the RGB drawn for it."""
    assert {name: sim.COLOUR_NAMES[name] for name in images.PALETTE} == images.PALETTE
    assert all(sim.colour_name(rgb) == name for name, rgb in images.PALETTE.items())


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
    assert one.colours == ["red", "blue", "yellow"]
    four = images.four_images()
    assert [f.colours for f in four] == [[c] for c in ["green", "orange", "purple", "black"]]
    assert one.data_url().startswith("data:image/png;base64,iVBOR")


def test_fixtures_are_stable() -> None:
    assert images.one_image().png == images.one_image().png


def test_unknown_colour_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown colour 'teal'"):
        images.render([images.Shape("square", "teal")])


def test_simulator_sees_the_same_shapes() -> None:
    info = sim.analyse(images.one_image().data_url(), 1)
    assert [s.colour for s in info.shapes] == ["red", "blue", "yellow"]
    assert [s.kind for s in info.shapes] == ["square", "circle", "square"]
    for fixture in images.four_images():
        assert [s.colour for s in sim.analyse(fixture.data_url(), 1).shapes] == fixture.colours
