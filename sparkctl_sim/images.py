"""What the simulator "sees" in an image: its size, and for PNGs the shapes drawn on the background.

PNG is decoded with zlib (all five row filters; grey, grey+alpha, RGB, RGBA and palette images at
8 bits per sample, not interlaced). The inked rows fall into bands separated by blank rows; in each
band, shapes are found left to right as runs of columns holding non-background pixels; each run gets
the colour name nearest to its median pixel and a shape name from how much of its bounding box it
fills (square/rectangle ≈ 1, circle/ellipse ≈ π/4, triangle ≈ ½). A published probe image (known by
the SHA-256 of its bytes, ``probes``) has its code printed in the top band: the simulator takes the
code from the probe file and reads the shapes from the bands below it.
JPEG and GIF give their size only. Remote URLs are not fetched (the simulator has no network).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkctl_sim import probes

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_PIXELS = 4_000_000

# The colours the simulator can name. The seven that sparkctl's qualify images draw (red, green,
# blue, yellow, black, orange, purple) have exactly the RGB those images use: one palette, pinned by
# tests/unit/test_qa_images.py (this package cannot import sparkctl, nor sparkctl this package).
COLOUR_NAMES: dict[str, tuple[int, int, int]] = {
    "black": (20, 20, 20),
    "white": (255, 255, 255),
    "gray": (128, 128, 128),
    "red": (220, 30, 30),
    "green": (30, 160, 60),
    "blue": (30, 70, 220),
    "yellow": (240, 200, 20),
    "orange": (245, 130, 20),
    "purple": (130, 50, 170),
    "pink": (250, 150, 200),
    "brown": (130, 80, 30),
    "cyan": (0, 210, 220),
    "magenta": (230, 0, 200),
}


def colour_name(rgb: tuple[int, int, int]) -> str:
    return min(
        COLOUR_NAMES, key=lambda n: sum((a - b) ** 2 for a, b in zip(COLOUR_NAMES[n], rgb, strict=True))
    )


@dataclass
class Shape:
    kind: str
    colour: str
    box: tuple[int, int, int, int]  # x0, y0, x1, y1 (exclusive)

    def describe(self) -> str:
        article = "an" if self.colour[0] in "aeiou" else "a"
        return f"{article} {self.colour} {self.kind}"


@dataclass
class ImageInfo:
    index: int
    fmt: str
    width: int | None = None
    height: int | None = None
    background: str | None = None
    shapes: list[Shape] = field(default_factory=list)
    note: str | None = None
    code: str | None = None  # the printed code of a recognised probe image

    @property
    def colours(self) -> list[str]:
        return [s.colour for s in self.shapes]

    def describe(self) -> str:
        size = f"{self.width}x{self.height} " if self.width is not None else ""
        head = f"Image {self.index}: {size}{self.fmt}"
        if self.code:
            head += f", printed code {self.code}"
        if self.note:
            return f"{head} ({self.note})."
        if not self.shapes:
            return f"{head}, plain {self.background or 'unknown'}." if self.background else f"{head}."
        n = len(self.shapes)
        listing = ", ".join(s.describe() for s in self.shapes)
        plural = "shape" if n == 1 else "shapes"
        return f"{head}, {n} {plural} on {self.background}, left to right: {listing}."


class PngError(ValueError):
    pass


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode_png(data: bytes) -> tuple[int, int, list[list[tuple[int, int, int]]]]:
    """(width, height, rows of RGB tuples); transparent pixels are composited on white."""
    if not data.startswith(PNG_SIGNATURE):
        raise PngError("not a PNG")
    pos = len(PNG_SIGNATURE)
    header: tuple[int, ...] | None = None
    palette: list[tuple[int, int, int]] = []
    idat = bytearray()
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        payload = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", payload)
        elif kind == b"PLTE":
            palette = [tuple(payload[i : i + 3]) for i in range(0, len(payload) - 2, 3)]  # type: ignore[misc]
        elif kind == b"IDAT":
            idat += payload
        elif kind == b"IEND":
            break
    if header is None:
        raise PngError("no IHDR chunk")
    width, height, depth, colour_type, _, _, interlace = header
    if depth != 8 or interlace != 0:
        raise PngError(f"{depth}-bit{' interlaced' if interlace else ''} PNGs are not decoded")
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(colour_type)
    if channels is None:
        raise PngError(f"unknown PNG colour type {colour_type}")
    if width * height > MAX_PIXELS:
        raise PngError("too large to analyse")
    try:
        raw = zlib.decompress(bytes(idat))
    except zlib.error as exc:
        raise PngError(f"corrupt image data ({exc})") from None
    stride = width * channels
    if len(raw) < height * (stride + 1):
        raise PngError("truncated image data")
    prev = bytearray(stride)
    rows: list[list[tuple[int, int, int]]] = []
    bpp = channels
    for y in range(height):
        start = y * (stride + 1)
        ftype = raw[start]
        line = bytearray(raw[start + 1 : start + 1 + stride])
        if ftype == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif ftype == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 0xFF
        elif ftype == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif ftype == 4:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                upleft = prev[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + _paeth(left, prev[i], upleft)) & 0xFF
        elif ftype != 0:
            raise PngError(f"unknown row filter {ftype}")
        rows.append(_to_rgb(line, colour_type, width, palette))
        prev = line
    return width, height, rows


def _to_rgb(
    line: bytearray, colour_type: int, width: int, palette: list[tuple[int, int, int]]
) -> list[tuple[int, int, int]]:
    if colour_type == 2:
        return [(line[i], line[i + 1], line[i + 2]) for i in range(0, 3 * width, 3)]
    if colour_type == 0:
        return [(v, v, v) for v in line[:width]]
    if colour_type == 3:
        return [palette[v] if v < len(palette) else (0, 0, 0) for v in line[:width]]
    out = []
    step = 4 if colour_type == 6 else 2
    for i in range(0, step * width, step):
        if colour_type == 6:
            r, g, b, a = line[i], line[i + 1], line[i + 2], line[i + 3]
        else:
            r = g = b = line[i]
            a = line[i + 1]
        out.append(tuple(int((c * a + 255 * (255 - a)) / 255) for c in (r, g, b)))
    return out  # type: ignore[return-value]


def _median(values: list[tuple[int, int, int]]) -> tuple[int, int, int]:
    return (
        sorted(v[0] for v in values)[len(values) // 2],
        sorted(v[1] for v in values)[len(values) // 2],
        sorted(v[2] for v in values)[len(values) // 2],
    )


def _kind(fill: float, w: int, h: int) -> str:
    squareish = 0.85 <= (w / h if h else 0) <= 1.18
    if fill >= 0.9:
        return "square" if squareish else "rectangle"
    if fill >= 0.65:
        return "circle" if squareish else "ellipse"
    if fill >= 0.35:
        return "triangle"
    return "shape"


def analyse_png(data: bytes, index: int) -> ImageInfo:
    width, height, rows = decode_png(data)
    info = ImageInfo(index=index, fmt="PNG", width=width, height=height)
    info.code = probes.printed_codes().get(hashlib.sha256(data).hexdigest())
    if not width or not height:
        return info
    corners = [rows[0][0], rows[0][-1], rows[-1][0], rows[-1][-1]]
    bg = max(set(corners), key=corners.count)
    info.background = colour_name(bg)

    def inked(px: tuple[int, int, int]) -> bool:
        return px != bg and sum(abs(a - b) for a, b in zip(px, bg, strict=True)) > 60

    ink_rows = [any(inked(px) for px in row) for row in rows]
    bands: list[tuple[int, int]] = []
    y = 0
    while y < height:
        if not ink_rows[y]:
            y += 1
            continue
        y0 = y
        while y < height and ink_rows[y]:
            y += 1
        bands.append((y0, y))
    if info.code is not None and bands:
        bands = bands[1:]  # the printed code is the top band
    for y0, y1 in bands:
        info.shapes += _shapes_in(rows, y0, y1, width, height, inked)
    return info


def _shapes_in(rows: list[list[tuple[int, int, int]]], top: int, bottom: int, width: int, height: int,
               inked: Callable[[tuple[int, int, int]], bool]) -> list[Shape]:
    """The shapes in rows ``top``..``bottom``, left to right (runs of inked columns)."""
    columns = [[y for y in range(top, bottom) if inked(rows[y][x])] for x in range(width)]
    shapes = []
    x = 0
    while x < width:
        if not columns[x]:
            x += 1
            continue
        x0 = x
        while x < width and columns[x]:
            x += 1
        ys = [y for col in columns[x0:x] for y in col]
        y0, y1 = min(ys), max(ys) + 1
        pixels = [rows[y][cx] for cx in range(x0, x) for y in columns[cx]]
        box_area = (x - x0) * (y1 - y0)
        if len(pixels) < max(4, width * height // 2000):
            continue  # specks and anti-aliasing noise
        shapes.append(
            Shape(
                _kind(len(pixels) / box_area, x - x0, y1 - y0), colour_name(_median(pixels)), (x0, y0, x, y1)
            )
        )
    return shapes


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    pos = 2
    while pos + 9 < len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return width, height
        pos += 2 + length
    return None


def analyse(url: str, index: int) -> ImageInfo:
    """Analyse one ``image_url`` (a data URL; anything else is only counted)."""
    if not url.startswith("data:"):
        return ImageInfo(index=index, fmt="remote image", note="not fetched: the simulator has no network")
    meta, _, payload = url.partition(",")
    try:
        data = base64.b64decode(payload, validate=False) if ";base64" in meta else payload.encode()
    except (binascii.Error, ValueError):
        return ImageInfo(index=index, fmt="image", note="undecodable data URL")
    if data.startswith(PNG_SIGNATURE):
        try:
            return analyse_png(data, index)
        except PngError as exc:
            size = struct.unpack(">II", data[16:24]) if len(data) >= 24 else (None, None)
            return ImageInfo(index=index, fmt="PNG", width=size[0], height=size[1], note=str(exc))
    if data[:3] == b"\xff\xd8\xff":
        jsize = _jpeg_size(data)
        return ImageInfo(
            index=index,
            fmt="JPEG",
            width=jsize[0] if jsize else None,
            height=jsize[1] if jsize else None,
            note="colours are only read from PNG images",
        )
    if data[:6] in (b"GIF87a", b"GIF89a"):
        w, h = struct.unpack("<HH", data[6:10])
        return ImageInfo(
            index=index, fmt="GIF", width=w, height=h, note="colours are only read from PNG images"
        )
    return ImageInfo(index=index, fmt="image", note=f"unrecognised format, {len(data)} bytes")
