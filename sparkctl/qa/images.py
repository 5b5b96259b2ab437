"""R4's vision probe images, drawn by sparkctl to the published description (standard library only).

R4's acceptance client sends PNG fixtures of its own (``sparkctl/qa/probes/r4.json`` names the
files): image 1, 960×640 (the PNG header in R4's recorded request), carries the printed code
``NORTH 7314`` and a red square on the left and a blue circle on the right; images 2–4 carry the
codes ``SOUTH 8265``, ``EAST 1948`` and ``WEST 5620`` "at the top" (R4's prompt). sparkctl draws all
four at image 1's size. The one-image check asks for the code and the two shapes left to right,
the four-image check for the four codes in order. sparkctl does not ship the publisher's PNGs: it
draws its own from those facts (size, code text, shapes, colours, order), read from the probe file.
The publisher's images 2–4 may carry more than their code; nothing else about them is asked or
published, so sparkctl draws the code only.

The code is printed in black in a 5×7 block font scaled ×10, centred at the top; the shapes are
200-pixel filled figures in the lower part, one per half of the width. Every image is an 8-bit RGB
PNG (colour type 2), filter type 0 on every row, one IDAT chunk, so the same facts always give the
same bytes: ``r4.json`` ``vision.drawn`` pins their SHA-256, and the rank simulator (which may not
import sparkctl) recognises the probe by it. ``PALETTE`` is the simulator's palette for these colour
names, value for value (a test pins the equality).
"""

from __future__ import annotations

import base64
import hashlib
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sparkctl.qa import probedata

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
WHITE = (255, 255, 255)

# Colour names a model is asked to say, and the exact RGB drawn for each. Far apart in RGB space, so
# "nearest palette colour" is never ambiguous.
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 160, 60),
    "blue": (30, 70, 220),
    "yellow": (240, 200, 20),
    "black": (20, 20, 20),
    "orange": (245, 130, 20),
    "purple": (130, 50, 170),
}
TEXT_COLOUR = "black"

ShapeKind = Literal["square", "circle"]
SHAPE_KINDS: tuple[str, ...] = ("square", "circle")

# A 5×7 block font: capitals and digits, "#" inked. Drawn at ×10 a glyph is 50×70 pixels.
_FONT_ROWS = {
    "A": ".###. #...# #...# ##### #...# #...# #...#",
    "B": "####. #...# #...# ####. #...# #...# ####.",
    "C": ".###. #...# #.... #.... #.... #...# .###.",
    "D": "####. #...# #...# #...# #...# #...# ####.",
    "E": "##### #.... #.... ####. #.... #.... #####",
    "F": "##### #.... #.... ####. #.... #.... #....",
    "G": ".###. #...# #.... #.### #...# #...# .####",
    "H": "#...# #...# #...# ##### #...# #...# #...#",
    "I": ".###. ..#.. ..#.. ..#.. ..#.. ..#.. .###.",
    "J": "..### ...#. ...#. ...#. ...#. #..#. .##..",
    "K": "#...# #..#. #.#.. ##... #.#.. #..#. #...#",
    "L": "#.... #.... #.... #.... #.... #.... #####",
    "M": "#...# ##.## #.#.# #.#.# #...# #...# #...#",
    "N": "#...# #...# ##..# #.#.# #..## #...# #...#",
    "O": ".###. #...# #...# #...# #...# #...# .###.",
    "P": "####. #...# #...# ####. #.... #.... #....",
    "Q": ".###. #...# #...# #...# #.#.# #..#. .##.#",
    "R": "####. #...# #...# ####. #.#.. #..#. #...#",
    "S": ".#### #.... #.... .###. ....# ....# ####.",
    "T": "##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#..",
    "U": "#...# #...# #...# #...# #...# #...# .###.",
    "V": "#...# #...# #...# #...# #...# .#.#. ..#..",
    "W": "#...# #...# #...# #.#.# #.#.# #.#.# .#.#.",
    "X": "#...# #...# .#.#. ..#.. .#.#. #...# #...#",
    "Y": "#...# #...# .#.#. ..#.. ..#.. ..#.. ..#..",
    "Z": "##### ....# ...#. ..#.. .#... #.... #####",
    "0": ".###. #...# #..## #.#.# ##..# #...# .###.",
    "1": "..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###.",
    "2": ".###. #...# ....# ...#. ..#.. .#... #####",
    "3": "##### ...#. ..#.. ...#. ....# #...# .###.",
    "4": "...#. ..##. .#.#. #..#. ##### ...#. ...#.",
    "5": "##### #.... ####. ....# ....# #...# .###.",
    "6": "..##. .#... #.... ####. #...# #...# .###.",
    "7": "##### ....# ...#. ..#.. .#... .#... .#...",
    "8": ".###. #...# #...# .###. #...# #...# .###.",
    "9": ".###. #...# #...# .#### ....# ...#. .##..",
    " ": "..... ..... ..... ..... ..... ..... .....",
}
FONT: dict[str, tuple[str, ...]] = {ch: tuple(rows.split()) for ch, rows in _FONT_ROWS.items()}
GLYPH_W, GLYPH_H = 5, 7
TEXT_SCALE = 10
TEXT_ADVANCE = (GLYPH_W + 1) * TEXT_SCALE  # one blank column between glyphs
TEXT_TOP = 40
SHAPE_SIZE = 200
SHAPE_TOP = 260


@dataclass(frozen=True)
class Shape:
    kind: ShapeKind
    colour: str

    @property
    def words(self) -> str:
        """``"red square"``: colour, a space, shape name (the published answer form)."""
        return f"{self.colour} {self.kind}"

    @classmethod
    def parse(cls, words: str) -> Shape:
        colour, _, kind = words.partition(" ")
        if colour not in PALETTE or kind not in SHAPE_KINDS:
            raise ValueError(f"cannot draw {words!r}: expected '<colour> <square|circle>'")
        return cls(kind, colour)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ImageFixture:
    """One drawn probe image and what is true about it."""

    number: int  # 1-based, as the publisher numbers its fixtures
    code: str
    shapes: tuple[Shape, ...]
    png: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.png).hexdigest()

    def data_url(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


def _chunk(kind: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def encode_png(width: int, height: int, pixels: Sequence[bytes]) -> bytes:
    """Encode rows of packed RGB bytes (``3 * width`` each) as a PNG."""
    if len(pixels) != height or any(len(row) != 3 * width for row in pixels):
        raise ValueError("pixel rows do not match the image size")
    raw = b"".join(b"\x00" + bytes(row) for row in pixels)  # filter type 0 (None) on every row
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        PNG_SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw, 9))
        + _chunk(b"IEND", b"")
    )


def text_box(code: str, width: int) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1) of the printed code: centred, ``TEXT_TOP`` pixels from the top."""
    span = len(code) * TEXT_ADVANCE - TEXT_SCALE
    x0 = (width - span) // 2
    return x0, TEXT_TOP, x0 + span, TEXT_TOP + GLYPH_H * TEXT_SCALE


def shape_boxes(count: int, width: int) -> list[tuple[int, int, int, int]]:
    """(x0, y0, x1, y1) of each shape: one per equal slice of the width, centred in it."""
    boxes = []
    for i in range(count):
        cx = width * (2 * i + 1) // (2 * count)
        boxes.append((cx - SHAPE_SIZE // 2, SHAPE_TOP, cx + SHAPE_SIZE // 2, SHAPE_TOP + SHAPE_SIZE))
    return boxes


def draw(code: str, shapes: Sequence[Shape], width: int, height: int) -> bytes:
    """A white ``width``×``height`` PNG: ``code`` printed at the top, ``shapes`` left to right below."""
    unknown = sorted({ch for ch in code if ch not in FONT})
    if unknown:
        raise ValueError(f"code {code!r}: no glyph for {''.join(unknown)!r} (capitals, digits and spaces)")
    for shape in shapes:
        if shape.colour not in PALETTE:
            raise ValueError(f"unknown colour {shape.colour!r}; choose one of {', '.join(PALETTE)}")
    tx0, ty0, _, ty1 = text_box(code, width)
    if tx0 < 0 or ty1 > height:
        raise ValueError(f"code {code!r} does not fit a {width}×{height} image")
    if shapes and height < SHAPE_TOP + SHAPE_SIZE:
        raise ValueError(f"a {width}×{height} image has no room for the shapes")
    canvas = [bytearray(WHITE * width) for _ in range(height)]

    def fill(x0: int, y0: int, x1: int, y1: int, rgb: tuple[int, int, int]) -> None:
        run = bytes(rgb) * (x1 - x0)
        for y in range(y0, y1):
            canvas[y][3 * x0 : 3 * x1] = run

    ink = PALETTE[TEXT_COLOUR]
    for i, ch in enumerate(code):
        gx = tx0 + i * TEXT_ADVANCE
        for row, bits in enumerate(FONT[ch]):
            for col, bit in enumerate(bits):
                if bit == "#":
                    x, y = gx + col * TEXT_SCALE, ty0 + row * TEXT_SCALE
                    fill(x, y, x + TEXT_SCALE, y + TEXT_SCALE, ink)
    for shape, (x0, y0, x1, y1) in zip(shapes, shape_boxes(len(shapes), width), strict=True):
        rgb = PALETTE[shape.colour]
        if shape.kind == "square":
            fill(x0, y0, x1, y1, rgb)
            continue
        radius = SHAPE_SIZE / 2
        for y in range(y0, y1):
            dy = y - y0 - radius + 0.5
            half = (radius * radius - dy * dy) ** 0.5 if dy * dy <= radius * radius else -1.0
            if half < 0:
                continue
            cx = (x0 + x1) / 2
            fill(round(cx - half), y, round(cx + half), y + 1, rgb)
    return encode_png(width, height, [bytes(row) for row in canvas])


# ---------------------------------------------------------------------------- the published fixtures
def _vision() -> dict[str, Any]:
    vision: dict[str, Any] = probedata.r4()["vision"]
    return vision


def size() -> tuple[int, int]:
    box = _vision()["image_size"]
    return int(box["width"]), int(box["height"])


def facts() -> dict[int, tuple[str, tuple[Shape, ...]]]:
    """Image number -> (printed code, shapes left to right), from the published expected answers."""
    vision = _vision()
    single, four = vision["single"], vision["four"]
    out: dict[int, tuple[str, tuple[Shape, ...]]] = {
        n: (str(code), ()) for n, code in zip(four["images"], four["expected"], strict=True)
    }
    (number,) = single["images"]
    expected = single["expected"]
    shapes = (Shape.parse(expected["left_shape"]), Shape.parse(expected["right_shape"]))
    if out.get(number, (expected["code"],))[0] != expected["code"]:
        raise ValueError(f"image {number}: the single-image and four-image answers disagree on its code")
    out[number] = (str(expected["code"]), shapes)
    return out


def fixture(number: int) -> ImageFixture:
    code, shapes = facts()[number]
    width, height = size()
    return ImageFixture(number, code, shapes, draw(code, shapes, width, height))


def one_image() -> ImageFixture:
    (number,) = _vision()["single"]["images"]
    return fixture(int(number))


def four_images() -> list[ImageFixture]:
    return [fixture(int(n)) for n in _vision()["four"]["images"]]


def drawn_digests() -> dict[str, str]:
    """Image number (as text) -> SHA-256 of the PNG sparkctl draws for it (what ``vision.drawn`` pins)."""
    return {str(n): fixture(n).sha256 for n in sorted(facts())}
