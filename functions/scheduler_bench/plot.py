"""`bench/lateness.png` without a plotting dependency: a small RGB canvas, a 5x7 bitmap font, and a PNG
writer (zlib + struct). Draws the burst's start lateness as a CDF and a histogram, one series per jitter."""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

Color = tuple[int, int, int]
WHITE: Color = (255, 255, 255)
BLACK: Color = (30, 30, 30)
GRID: Color = (225, 225, 225)
AXIS: Color = (120, 120, 120)
SERIES_COLORS: tuple[Color, ...] = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40))

_GLYPHS = {
    "A": ".###.#...##...#######...##...##...#",
    "B": "####.#...##...#####.#...##...#####.",
    "C": ".###.#...##....#....#....#...#.###.",
    "D": "####.#...##...##...##...##...#####.",
    "E": "######....#....####.#....#....#####",
    "F": "######....#....####.#....#....#....",
    "G": ".###.#...##....#.####...##...#.####",
    "H": "#...##...##...#######...##...##...#",
    "I": ".###...#....#....#....#....#...###.",
    "J": "..###...#....#....#....#.#..#..##..",
    "K": "#...##..#.#.#..##...#.#..#..#.#...#",
    "L": "#....#....#....#....#....#....#####",
    "M": "#...###.###.#.##.#.##...##...##...#",
    "N": "#...##...###..##.#.##..###...##...#",
    "O": ".###.#...##...##...##...##...#.###.",
    "P": "####.#...##...#####.#....#....#....",
    "Q": ".###.#...##...##...##.#.##..#..##.#",
    "R": "####.#...##...#####.#.#..#..#.#...#",
    "S": ".#####....#.....###.....#....#####.",
    "T": "#####..#....#....#....#....#....#..",
    "U": "#...##...##...##...##...##...#.###.",
    "V": "#...##...##...##...##...#.#.#...#..",
    "W": "#...##...##...##.#.##.#.##.#.#.#.#.",
    "X": "#...##...#.#.#...#...#.#.#...##...#",
    "Y": "#...##...#.#.#...#....#....#....#..",
    "Z": "#####....#...#...#...#...#....#####",
    "0": ".###.#...##..###.#.###..##...#.###.",
    "1": "..#...##....#....#....#....#...###.",
    "2": ".###.#...#....#...#...#...#...#####",
    "3": "#####...#...#.....#.....##...#.###.",
    "4": "...#...##..#.#.#..#.#####...#....#.",
    "5": "######....####.....#....##...#.###.",
    "6": "..##..#...#....####.#...##...#.###.",
    "7": "#####....#...#...#...#....#....#...",
    "8": ".###.#...##...#.###.#...##...#.###.",
    "9": ".###.#...##...#.####....#...#..##..",
    ".": "..........................##...##..",
    ",": ".....................##....#...#...",
    "-": "...............#####...............",
    "%": "##...##..#...#...#...#...#..##...##",
    "(": "...#...#...#....#....#.....#.....#.",
    ")": ".#.....#.....#....#....#...#...#...",
    "/": ".........#...#...#...#...#.........",
    ":": "......##...##........##...##.......",
    "=": "..........#####.....#####..........",
    "+": ".......#....#..#####..#....#.......",
    "<": "...#...#...#...#.....#.....#.....#.",
    ">": ".#.....#.....#.....#...#...#...#...",
    " ": "." * 35,
}
FONT = dict(_GLYPHS)


class Canvas:
    """An RGB image in memory, white to start, that draws rectangles, lines and 5x7 text and encodes a PNG."""

    def __init__(self, width: int, height: int) -> None:
        self.width = width
        self.height = height
        self.pixels = bytearray(WHITE * (width * height))

    def blend(self, x: int, y: int, color: Color, alpha: float = 1.0) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            i = (y * self.width + x) * 3
            for c in range(3):
                self.pixels[i + c] = round(self.pixels[i + c] * (1 - alpha) + color[c] * alpha)

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: Color, alpha: float = 1.0) -> None:
        for y in range(max(0, min(y0, y1)), min(self.height, max(y0, y1) + 1)):
            for x in range(max(0, min(x0, x1)), min(self.width, max(x0, x1) + 1)):
                self.blend(x, y, color, alpha)

    def line(self, x0: int, y0: int, x1: int, y1: int, color: Color, width: int = 1) -> None:
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for i in range(steps + 1):
            x = round(x0 + (x1 - x0) * i / steps)
            y = round(y0 + (y1 - y0) * i / steps)
            half = width // 2
            self.rect(x - half, y - half, x - half + width - 1, y - half + width - 1, color)

    def text(self, x: int, y: int, text: str, color: Color = BLACK, scale: int = 2) -> int:
        """Draw `text` with its top-left corner at (x, y); returns its width in pixels."""
        cursor = x
        for char in text.upper():
            glyph = FONT.get(char, FONT[" "])
            for row in range(7):
                for col in range(5):
                    if glyph[row * 5 + col] == "#":
                        self.rect(cursor + col * scale, y + row * scale, cursor + col * scale + scale - 1,
                                  y + row * scale + scale - 1, color)  # fmt: skip
            cursor += 6 * scale
        return cursor - x

    def png(self) -> bytes:
        raw = b"".join(
            b"\x00" + bytes(self.pixels[y * self.width * 3 : (y + 1) * self.width * 3]) for y in range(self.height)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
        )


def text_width(text: str, scale: int = 2) -> int:
    """Pixels `Canvas.text` takes for `text`."""
    return len(text) * 6 * scale


def nice_step(span: float, ticks: int = 6) -> float:
    """A round tick step (1, 2 or 5 times a power of ten) giving about `ticks` ticks over `span`."""
    raw = max(span, 1e-9) / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    return next(float(m * power) for m in (1, 2, 5, 10) if m * power >= raw)


def _label(value: float) -> str:
    return f"{value:.0f}" if abs(value - round(value)) < 1e-9 else f"{value:.1f}"


@dataclass(frozen=True)
class Series:
    """One distribution to plot, with its legend label."""

    label: str
    values: Sequence[float]


@dataclass(frozen=True)
class Panel:
    """A plot area in pixels and the data range it maps (`px`, `py`)."""

    left: int
    top: int
    right: int
    bottom: int
    x_min: float
    x_max: float
    y_max: float

    def px(self, x: float) -> int:
        return round(self.left + (x - self.x_min) / (self.x_max - self.x_min) * (self.right - self.left))

    def py(self, y: float) -> int:
        return round(self.bottom - y / self.y_max * (self.bottom - self.top))


def _axes(canvas: Canvas, panel: Panel, x_step: float, y_step: float, y_format: str, y_title: str) -> None:
    x = math.ceil(panel.x_min / x_step) * x_step
    while x <= panel.x_max + 1e-9:
        px = panel.px(x)
        canvas.line(px, panel.top, px, panel.bottom, GRID)
        label = _label(x)
        canvas.text(px - text_width(label) // 2, panel.bottom + 8, label)
        x += x_step
    y = 0.0
    while y <= panel.y_max + 1e-9:
        py = panel.py(y)
        canvas.line(panel.left, py, panel.right, py, GRID)
        label = y_format.format(y)
        canvas.text(panel.left - 10 - text_width(label), py - 7, label)
        y += y_step
    canvas.line(panel.left, panel.bottom, panel.right, panel.bottom, AXIS)
    canvas.line(panel.left, panel.top, panel.left, panel.bottom, AXIS)
    canvas.text(panel.left, panel.top - 22, y_title, AXIS)


def lateness_png(path: Path, series: Sequence[Series], title: str, x_title: str = "START LATENESS (S)") -> None:
    """A CDF (top) and a histogram (bottom) of each series' values, written to `path` as a PNG."""
    width, height = 1000, 720
    canvas = Canvas(width, height)
    canvas.text((width - text_width(title)) // 2, 16, title)
    values = [v for s in series for v in s.values]
    x_min = min(0.0, min(values, default=0.0))
    x_max = max(values, default=1.0)
    step = nice_step(x_max - x_min)
    x_max = math.ceil(x_max / step) * step if x_max > x_min else x_min + step
    x_min = math.floor(x_min / step) * step

    cdf = Panel(110, 80, width - 40, 340, x_min, x_max, 100.0)
    _axes(canvas, cdf, step, 20, "{:.0f}%", "CUMULATIVE SHARE OF OCCURRENCES")
    for index, s in enumerate(series):
        color = SERIES_COLORS[index % len(SERIES_COLORS)]
        ordered = sorted(s.values)
        previous = (cdf.px(x_min), cdf.py(0))
        for rank, value in enumerate(ordered, start=1):
            x, y = cdf.px(value), cdf.py(100 * rank / len(ordered))
            canvas.line(previous[0], previous[1], x, previous[1], color, 2)
            canvas.line(x, previous[1], x, y, color, 2)
            previous = (x, y)
        canvas.line(previous[0], previous[1], cdf.right, previous[1], color, 2)

    bins = 50
    bin_width = (x_max - x_min) / bins
    counts = []
    for s in series:
        row = [0] * bins
        for value in s.values:
            row[min(bins - 1, max(0, int((value - x_min) / bin_width)))] += 1
        counts.append(row)
    top = max((max(row) for row in counts), default=1) or 1
    y_step = nice_step(top, 4)
    histogram = Panel(110, 420, width - 40, 640, x_min, x_max, math.ceil(top / y_step) * y_step)
    _axes(canvas, histogram, step, y_step, "{:.0f}", "OCCURRENCES PER BIN")
    for index, row in enumerate(counts):
        color = SERIES_COLORS[index % len(SERIES_COLORS)]
        for b, n in enumerate(row):
            if n:
                x0 = histogram.px(x_min + b * bin_width) + 1
                x1 = histogram.px(x_min + (b + 1) * bin_width) - 1
                canvas.rect(x0, histogram.py(n), x1, histogram.bottom - 1, color, 0.55)
    canvas.text((width - text_width(x_title)) // 2, height - 40, x_title, AXIS)

    # The legend sits bottom right of the CDF, where rising curves leave room, on a white box.
    label_width = max((text_width(s.label) for s in series), default=0)
    x = cdf.right - 20 - label_width - 36
    legend_y = cdf.bottom - 20 - 24 * len(series)
    canvas.rect(x - 10, legend_y - 10, cdf.right - 10, cdf.bottom - 12, WHITE)
    canvas.line(x - 10, legend_y - 10, cdf.right - 10, legend_y - 10, AXIS)
    canvas.line(x - 10, cdf.bottom - 12, cdf.right - 10, cdf.bottom - 12, AXIS)
    canvas.line(x - 10, legend_y - 10, x - 10, cdf.bottom - 12, AXIS)
    canvas.line(cdf.right - 10, legend_y - 10, cdf.right - 10, cdf.bottom - 12, AXIS)
    for index, s in enumerate(series):
        color = SERIES_COLORS[index % len(SERIES_COLORS)]
        canvas.rect(x, legend_y + index * 24, x + 18, legend_y + index * 24 + 13, color)
        canvas.text(x + 28, legend_y + index * 24, s.label)
    path.write_bytes(canvas.png())
