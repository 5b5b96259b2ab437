"""Test images for the vision checks, written with the standard library only.

Every image is an 8-bit RGB PNG (colour type 2) with filter type 0 on every row and a single IDAT
chunk: the simplest PNG there is. sparkctl only writes images; the one PNG decoder is the rank
simulator's (``sparkctl_sim.images``, standard library, every filter and colour type), and the
tests read these fixtures with it and with Pillow. ``PALETTE`` is the simulator's palette for these
colour names, value for value (the two packages may not import each other; a test pins the
equality). Shapes are filled squares and circles in well-separated colours on white, laid out left
to right in equal cells with white gaps between them, so "how many, which colours, in what order"
has one unambiguous answer.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

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

ShapeKind = Literal["square", "circle"]


@dataclass(frozen=True)
class Shape:
    kind: ShapeKind
    colour: str


@dataclass(frozen=True)
class ImageFixture:
    """One generated image and what is true about it."""

    name: str
    shapes: tuple[Shape, ...]
    png: bytes

    @property
    def colours(self) -> list[str]:
        return [s.colour for s in self.shapes]

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


def render(shapes: Sequence[Shape], cell: int = 128, margin: int = 24) -> bytes:
    """Draw shapes left to right, one per ``cell``-pixel square cell, on white."""
    for shape in shapes:
        if shape.colour not in PALETTE:
            raise ValueError(f"unknown colour {shape.colour!r}; choose one of {', '.join(PALETTE)}")
    width, height = cell * len(shapes), cell
    size = cell - 2 * margin
    radius = size / 2
    rows: list[bytes] = []
    for y in range(height):
        row = bytearray(WHITE * width)
        for i, shape in enumerate(shapes):
            x0, y0 = i * cell + margin, margin
            if not y0 <= y < y0 + size:
                continue
            r, g, b = PALETTE[shape.colour]
            for x in range(x0, x0 + size):
                if shape.kind == "circle":
                    dx, dy = x - x0 - radius + 0.5, y - y0 - radius + 0.5
                    if dx * dx + dy * dy > radius * radius:
                        continue
                row[3 * x : 3 * x + 3] = bytes((r, g, b))
        rows.append(bytes(row))
    return encode_png(width, height, rows)


# The pinned fixtures the qualify suite sends. Changing them changes what "pass" means.
ONE_IMAGE_SHAPES = (Shape("square", "red"), Shape("circle", "blue"), Shape("square", "yellow"))
FOUR_IMAGE_SHAPES = (
    Shape("circle", "green"),
    Shape("square", "orange"),
    Shape("circle", "purple"),
    Shape("square", "black"),
)


def one_image() -> ImageFixture:
    return ImageFixture("three-shapes", ONE_IMAGE_SHAPES, render(ONE_IMAGE_SHAPES))


def four_images() -> list[ImageFixture]:
    return [ImageFixture(f"shape-{i + 1}", (s,), render((s,))) for i, s in enumerate(FOUR_IMAGE_SHAPES)]
