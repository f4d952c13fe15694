"""Just enough raster drawing for a scatter plot with lines, drawn into a NumPy RGB array and written
with evaluate/png.py, text with evaluate/font.py's pixel font: no plotting dependency.

Coordinates are pixels, (x, y) with y growing downwards; `Axes` maps data to pixels.
"""
from __future__ import annotations

import math

import numpy as np

from evaluate.font import draw_text, text_size

WHITE, BLACK, GREY, LIGHT = (255, 255, 255), (30, 30, 30), (120, 120, 120), (225, 225, 225)


class Canvas:
    def __init__(self, height: int, width: int, background=WHITE):
        self.pixels = np.empty((height, width, 3), np.uint8)
        self.pixels[:] = background

    @property
    def height(self) -> int:
        return self.pixels.shape[0]

    @property
    def width(self) -> int:
        return self.pixels.shape[1]

    def rect(self, x0: float, y0: float, x1: float, y1: float, colour) -> None:
        """Filled rectangle, corners included, clipped to the canvas."""
        xa, xb = sorted((int(round(x0)), int(round(x1))))
        ya, yb = sorted((int(round(y0)), int(round(y1))))
        self.pixels[max(ya, 0):max(yb + 1, 0), max(xa, 0):max(xb + 1, 0)] = colour

    def dot(self, x: float, y: float, radius: float, colour) -> None:
        """Filled disc (at least the nearest pixel), drawn in its bounding box only."""
        r = max(radius, 0.5)
        x0, x1 = max(int(math.floor(x - r)), 0), min(int(math.ceil(x + r)) + 1, self.width)
        y0, y1 = max(int(math.floor(y - r)), 0), min(int(math.ceil(y + r)) + 1, self.height)
        if x0 >= x1 or y0 >= y1:
            return
        ys, xs = np.ogrid[y0:y1, x0:x1]
        self.pixels[y0:y1, x0:x1][(xs - x) ** 2 + (ys - y) ** 2 <= r ** 2] = colour

    def line(self, x0: float, y0: float, x1: float, y1: float, colour, width: float = 1.0,
             dash: tuple[int, int] | None = None) -> None:
        """A straight line as a run of discs one pixel apart; `dash` = (on, off) in pixels."""
        length = math.hypot(x1 - x0, y1 - y0)
        steps = max(1, int(math.ceil(length)))
        for i in range(steps + 1):
            if dash and (i % sum(dash)) >= dash[0]:
                continue
            t = i / steps
            self.dot(x0 + t * (x1 - x0), y0 + t * (y1 - y0), width / 2, colour)

    def marker(self, x: float, y: float, shape: str, colour, size: float = 5.0) -> None:
        """o filled circle, O ring, s hollow square, x cross, ^ filled triangle."""
        if shape == "o":
            self.dot(x, y, size, colour)
        elif shape == "O":
            self.dot(x, y, size, colour)
            self.dot(x, y, size - 2, WHITE)
        elif shape == "s":
            self.rect(x - size, y - size, x + size, y + size, colour)
            self.rect(x - size + 2, y - size + 2, x + size - 2, y + size - 2, WHITE)
        elif shape == "x":
            self.line(x - size, y - size, x + size, y + size, colour, 2.5)
            self.line(x - size, y + size, x + size, y - size, colour, 2.5)
        elif shape == "^":
            for row in range(int(2 * size) + 1):
                half = row / 2
                self.rect(x - half, y - size + row, x + half, y - size + row, colour)
        else:
            raise ValueError(f"unknown marker {shape!r}")

    def text(self, text: str, x: float, y: float, colour=BLACK, scale: int = 2, anchor: str = "left") -> None:
        """Text with its top at y; anchor left / centre / right at x."""
        _, width = text_size(text, scale)
        left = {"left": x, "centre": x - width / 2, "right": x - width}[anchor]
        draw_text(self.pixels, text, int(round(y)), int(round(left)), scale, colour)


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) covering [low, high]."""
    if not high > low:
        return [low]
    raw = (high - low) / max(1, count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    ticks, value = [], first
    while value <= high + 1e-9 * step:
        ticks.append(round(value, 12))
        value += step
    return ticks


def tick_label(value: float) -> str:
    return f"{value:.6g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.1e}"


class Axes:
    """A plot area inside a canvas: data ranges mapped onto a pixel box, with a frame and ticks."""

    def __init__(self, canvas: Canvas, box: tuple[int, int, int, int], x_range: tuple[float, float],
                 y_range: tuple[float, float]):
        self.canvas, (self.left, self.top, self.right, self.bottom) = canvas, box
        self.x_range, self.y_range = x_range, y_range

    def px(self, x: float) -> float:
        lo, hi = self.x_range
        return self.left + (x - lo) / (hi - lo) * (self.right - self.left)

    def py(self, y: float) -> float:
        lo, hi = self.y_range
        return self.bottom - (y - lo) / (hi - lo) * (self.bottom - self.top)

    def frame(self, x_ticks: list[float], y_ticks: list[float], x_labels: list[str] | None = None) -> None:
        c = self.canvas
        for value in y_ticks:
            c.line(self.left, self.py(value), self.right, self.py(value), LIGHT)
            c.text(tick_label(value), self.left - 6, self.py(value) - 5, GREY, 2, "right")
        for value, label in zip(x_ticks, x_labels or [tick_label(v) for v in x_ticks]):
            c.line(self.px(value), self.bottom, self.px(value), self.bottom + 4, GREY)
            c.text(label, self.px(value), self.bottom + 8, GREY, 2, "centre")
        for x0, y0, x1, y1 in ((self.left, self.top, self.right, self.top),
                               (self.left, self.bottom, self.right, self.bottom),
                               (self.left, self.top, self.left, self.bottom),
                               (self.right, self.top, self.right, self.bottom)):
            c.line(x0, y0, x1, y1, BLACK)
