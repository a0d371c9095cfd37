"""LOLWUT: computer art and the server's version, as Redis's ``lolwut.c``, ``lolwut5.c`` and ``lolwut6.c`` draw it.

``LOLWUT [VERSION v] [arguments...]`` picks the art of Redis version ``v``; without VERSION it is the art of
the version kvd reports (7.2), which, as on Redis 7, has none: the reply is ``Redis ver. 7.2.0``. Version 5
is Georg Nees's *Schotter* (1968), squares that come loose row by row, drawn on a pixel canvas and printed as
Braille characters (2 x 4 pixels each): ``LOLWUT VERSION 5 [columns] [squares-per-row] [squares-per-column]``.
Version 6 is a skyline of 8-bit skyscrapers in the terminal's four grays:
``LOLWUT VERSION 6 [columns] [rows]``. Both are random the way Redis's are (its first two Schotter rows are
not, so they match Redis's exactly); sizes are clamped to Redis's limits, so the command stays cheap.

The geometry uses C's single-precision floats where Redis does (``_f32``), so that the squares land on the
same pixels as Redis's, and C's ``round`` (half away from zero) rather than Python's.

Complexity: O(columns x rows) of the canvas.
"""

from __future__ import annotations

import math
import random
import struct
from typing import TYPE_CHECKING, Any

from .args import parse_int
from .connection import REDIS_COMPAT_VERSION
from .registry import FAST, READONLY, command

if TYPE_CHECKING:
    from kvd.connection import Client

_pack_float = struct.Struct("f")


def _f32(value: float) -> float:
    """``value`` rounded to a C ``float``."""
    return _pack_float.unpack(_pack_float.pack(value))[0]  # type: ignore[no-any-return]


def _c_round(value: float) -> int:
    """C's ``round``: halves away from zero."""
    return int(math.copysign(math.floor(abs(value) + 0.5), value))


class Canvas:
    """A ``width`` x ``height`` grid of colors, 0 at the top-left; drawing outside it does nothing."""

    __slots__ = ("height", "pixels", "width")

    def __init__(self, width: int, height: int, background: int) -> None:
        self.width = width
        self.height = height
        self.pixels = bytearray([background]) * (width * height)

    def draw(self, x: int, y: int, color: int) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            self.pixels[x + y * self.width] = color

    def get(self, x: int, y: int) -> int:
        if 0 <= x < self.width and 0 <= y < self.height:
            return self.pixels[x + y * self.width]
        return 0

    def line(self, x1: int, y1: int, x2: int, y2: int, color: int) -> None:
        """Bresenham's line, end points included."""
        dx, dy = abs(x2 - x1), abs(y2 - y1)
        sx = 1 if x1 < x2 else -1
        sy = 1 if y1 < y2 else -1
        err = dx - dy
        while True:
            self.draw(x1, y1, color)
            if x1 == x2 and y1 == y2:
                return
            e2 = err * 2
            if e2 > -dy:
                err -= dy
                x1 += sx
            if e2 < dx:
                err += dx
                y1 += sy

    def square(self, x: int, y: int, size: float, angle: float, color: int) -> None:
        """A square of side ``size`` centred on x, y and turned by ``angle``: its corners are points of the
        circle around it, 90 degrees apart."""
        size = _c_round(_f32(size / 1.4142135623))
        k = _f32(math.pi / 4 + angle)
        points = []
        for _ in range(4):
            points.append((_c_round(math.sin(k) * size + x), _c_round(math.cos(k) * size + y)))
            k = _f32(k + math.pi / 2)
        for j in range(4):
            (x1, y1), (x2, y2) = points[j], points[(j + 1) % 4]
            self.line(x1, y1, x2, y2, color)


# -- version 5: Schotter -----------------------------------------------------------------------------------------


def schotter(columns: int, per_row: int, per_column: int) -> Canvas:
    """Georg Nees's squares: a canvas two pixels per column wide, rows below the second turned and moved more
    the lower they are."""
    width = columns * 2
    padding = 2 if width > 4 else 0
    side = _f32((width - padding * 2) / per_row)
    canvas = Canvas(width, int(_f32(_f32(side * per_column) + padding * 2)), 0)
    half = _f32(side / 2)
    for y in range(per_column):
        for x in range(per_row):
            sx = int(_f32(_f32(_f32(x * side) + half) + padding))
            sy = int(_f32(_f32(_f32(y * side) + half) + padding))
            angle = 0.0
            if y > 1:
                r1, r2, r3 = (_f32(_f32(random.random() / per_column) * y) for _ in range(3))
                if random.getrandbits(1):
                    r1 = -r1
                if random.getrandbits(1):
                    r2 = -r2
                if random.getrandbits(1):
                    r3 = -r3
                angle = r1
                sx = int(_f32(sx + _f32(_f32(r2 * side) / 3)))
                sy = int(_f32(sy + _f32(_f32(r3 * side) / 3)))
            canvas.square(sx, sy, side, angle, 1)
    return canvas


def braille(canvas: Canvas) -> str:
    """The canvas as Braille characters, each 2 pixels wide and 4 tall (Unicode's dot order)."""
    lines = []
    for y in range(0, canvas.height, 4):
        row = []
        for x in range(0, canvas.width, 2):
            dots = 0
            for bit, (dx, dy) in enumerate(((0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (0, 3), (1, 3))):
                if canvas.get(x + dx, y + dy):
                    dots |= 1 << bit
            row.append(chr(0x2800 + dots))
        lines.append("".join(row))
    text = "\n".join(lines)
    if (canvas.height - 1) % 4:  # Redis ends every row with a newline unless it started on the last pixel row
        text += "\n"
    return text


# -- version 6: a skyline ---------------------------------------------------------------------------------------

_GRAYS = ("0;30;40m", "0;90;100m", "0;37;47m", "0;97;107m")  # black, gray, light gray, white: fore and back


def _skyscraper(canvas: Canvas, xoff: int, width: int, height: int, windows: bool, color: int) -> None:
    start = canvas.height - 1
    end = start - height + 1
    for y in range(start, end - 1, -1):
        for x in range(xoff, xoff + width):
            if y == end and (x <= xoff + 1 or x >= xoff + width - 2):
                continue  # the roof is four pixels narrower
            c = color
            if windows and xoff + 1 < x < xoff + width - 2 and end + 1 < y < start - 1:
                relx, rely = x - (xoff + 1), y - (end + 1)
                if (relx // 2) % 2 and rely % 2:  # windows two pixels wide, one tall
                    c = color
                    while c == color:
                        c = 1 + random.getrandbits(1)
                    if relx % 2:
                        c = canvas.get(x - 1, y)  # both pixels of a window alike
            canvas.draw(x, y, c)


def skyline(columns: int, rows: int) -> Canvas:
    """Two rows of plain skyscrapers in grays, then one of black ones with lit windows, on white."""
    canvas = Canvas(columns, rows, 3)
    h = canvas.height
    for color in (2, 1):
        offset = -10
        while offset < canvas.width:
            offset += random.randrange(8)
            width = 10 + random.randrange(9)
            height = h // 2 + (random.randrange(h) // 2 if color == 2 else random.randrange(h) // 3)
            _skyscraper(canvas, offset, width, height, False, color)
            offset += width // 2 if color == 2 else width + 1
    offset = -10
    while offset < canvas.width:
        offset += random.randrange(8)
        width = 5 + random.randrange(14)
        if width % 4:
            width += width % 3
        _skyscraper(canvas, offset, width, h // 3 + random.randrange(h) // 2, True, 0)
        offset += width + 5
    return canvas


def terminal(canvas: Canvas) -> str:
    """The canvas as one space per pixel, colored with ANSI escapes (foreground and background both)."""
    return "\n".join(
        "".join(f"\033[{_GRAYS[canvas.get(x, y)]} \033[0m" for x in range(canvas.width)) for y in range(canvas.height)
    )


def _sizes(argv: list[Any], defaults: tuple[int, ...], limits: tuple[int, ...]) -> list[int]:
    """The optional numeric arguments, each clamped to 1..limit as Redis does."""
    values = [parse_int(argv[i]) if i < len(argv) else default for i, default in enumerate(defaults, start=1)]
    return [min(max(v, 1), limit) for v, limit in zip(values, limits, strict=True)]


@command(
    "lolwut",
    -1,
    f"{READONLY} {FAST}",
    group="server",
    since="5.0.0",
    complexity="",
    summary="Display some computer art and the Redis version",
    usage="[VERSION version]",
)
def lolwut(c: Client, argv: list[Any]) -> None:
    version = REDIS_COMPAT_VERSION
    if len(argv) >= 3 and bytes(argv[1]).lower() == b"version":
        version = f"{parse_int(argv[2]) & 0xFFFFFFFF}.0.0"  # C's %u of an unsigned int
        argv = argv[2:]  # what follows VERSION v is the art's own arguments
    signature = f"Redis ver. {REDIS_COMPAT_VERSION}\n"
    if (version[:2] == "5." and version[2:3] != "9") or version.startswith("4.9"):
        columns, per_row, per_column = _sizes(argv, (66, 8, 12), (1000, 200, 200))
        art = braille(schotter(columns, per_row, per_column))
        c.reply.verbatim(f"{art}\nGeorg Nees - schotter, plotter on paper, 1968. {signature}")
    elif (version[:2] == "6." and version[2:3] != "9") or version.startswith("5.9"):
        columns, rows = _sizes(argv, (80, 20), (1000, 1000))
        art = terminal(skyline(columns, rows))
        c.reply.verbatim(
            f"{art}\nDedicated to the 8 bit game developers of past and present.\n"
            f"Original 8 bit image from Plaguemon by hikikomori. {signature}"
        )
    else:
        c.reply.verbatim(signature)
