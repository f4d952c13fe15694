"""A 3x5 pixel font, so PNG pictures can carry captions and vote counts without a font library.

Letters are drawn in one case (task ids are hex, names like ``AboveBelow1`` stay readable);
a character without a glyph is drawn as ``?``.
"""
from __future__ import annotations

import numpy as np

GLYPH_W, GLYPH_H = 3, 5

_GLYPHS = {
    "0": "### #.# #.# #.# ###", "1": ".#. ##. .#. .#. ###", "2": "### ..# ### #.. ###",
    "3": "### ..# ### ..# ###", "4": "#.# #.# ### ..# ..#", "5": "### #.. ### ..# ###",
    "6": "### #.. ### #.# ###", "7": "### ..# ..# ..# ..#", "8": "### #.# ### #.# ###",
    "9": "### #.# ### ..# ###",
    "a": ".#. #.# ### #.# #.#", "b": "##. #.# ##. #.# ##.", "c": ".## #.. #.. #.. .##",
    "d": "##. #.# #.# #.# ##.", "e": "### #.. ##. #.. ###", "f": "### #.. ##. #.. #..",
    "g": ".## #.. #.# #.# .##", "h": "#.# #.# ### #.# #.#", "i": "### .#. .#. .#. ###",
    "j": "..# ..# ..# #.# .#.", "k": "#.# #.# ##. #.# #.#", "l": "#.. #.. #.. #.. ###",
    "m": "#.# ### ### #.# #.#", "n": "##. #.# #.# #.# #.#", "o": ".#. #.# #.# #.# .#.",
    "p": "##. #.# ##. #.. #..", "q": ".#. #.# #.# ##. .##", "r": "##. #.# ##. #.# #.#",
    "s": ".## #.. .#. ..# ##.", "t": "### .#. .#. .#. .#.", "u": "#.# #.# #.# #.# ###",
    "v": "#.# #.# #.# #.# .#.", "w": "#.# #.# ### ### #.#", "x": "#.# #.# .#. #.# #.#",
    "y": "#.# #.# .#. .#. .#.", "z": "### ..# .#. #.. ###",
    " ": "... ... ... ... ...", "#": "#.# ### #.# ### #.#", ":": "... .#. ... .#. ...",
    ".": "... ... ... ... .#.", ",": "... ... ... .#. #..", "/": "..# ..# .#. #.. #..",
    "-": "... ... ### ... ...", "_": "... ... ... ... ###", "(": ".#. #.. #.. #.. .#.",
    ")": ".#. ..# ..# ..# .#.", "%": "#.# ..# .#. #.. #.#", "=": "... ### ... ### ...",
    "+": "... .#. ### .#. ...", "?": "##. ..# .#. ... .#.", "[": "##. #.. #.. #.. ##.",
    "]": ".## ..# ..# ..# .##", "@": "### #.# #.. #.. ###",
}
GLYPHS = {ch: np.array([[c == "#" for c in row] for row in rows.split()], dtype=bool)
          for ch, rows in _GLYPHS.items()}


def text_size(text: str, scale: int) -> tuple[int, int]:
    """(height, width) in pixels of ``text`` drawn at ``scale``: glyphs plus one column between."""
    if not text:
        return 0, 0
    return GLYPH_H * scale, (len(text) * (GLYPH_W + 1) - 1) * scale


def draw_text(image: np.ndarray, text: str, y: int, x: int, scale: int, colour) -> None:
    """Draw ``text`` with its top-left corner at (y, x), clipped to the image."""
    for k, ch in enumerate(text):
        glyph = GLYPHS.get(ch.lower(), GLYPHS["?"])
        mask = np.kron(glyph, np.ones((scale, scale), dtype=bool))
        top, left = y, x + k * (GLYPH_W + 1) * scale
        region = image[top:top + mask.shape[0], left:left + mask.shape[1]]
        region[mask[:region.shape[0], :region.shape[1]]] = colour
