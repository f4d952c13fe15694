"""``identifiers.json`` (id -> puzzle name) kept as raw bytes with the byte range of every name.

A full build names ~800,000 puzzles. ``json.load`` makes a Python string of each (0.1 s), and
anything done per name in Python costs ~0.1 s more per pass; the vote only needs the names of the
~370,000 puzzles it sees, and only their suffixes and task prefixes, which numpy reads straight from
the bytes. Names are decoded one at a time where a message or a picture needs them.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from evaluate.errors import EvaluationInputError

_QUOTE = ord('"')


class Identifiers:
    def __init__(self, path: Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise EvaluationInputError(f"{self.path} not found: is {self.path.parent} a build directory?")
        raw = self.path.read_bytes()
        if not self._split_plain_list(raw):
            # escapes (non-ASCII names, quotes in names) or another layout: json decides
            self._from_names(self._load_json(raw))
        if len(self) == 0 or self[0] != "<blank>":
            raise EvaluationInputError(f"{self.path} must be a list of names starting with \"<blank>\"")

    def _split_plain_list(self, raw: bytes) -> bool:
        """Find the names of ``json.dumps(list_of_names)`` output without decoding it: no escapes,
        so every pair of quotes encloses one name, and only ``", "`` (or ``","``) between them.
        Only ASCII, as json.dumps writes it: other bytes (a file that is not UTF-8) go to json,
        which names the file, where decoding a name here later would fail unnamed."""
        if b"\\" in raw or not raw.isascii() or not raw.lstrip().startswith(b'["') \
                or not raw.rstrip().endswith(b'"]'):
            return False
        buf = np.frombuffer(raw, dtype=np.uint8)
        quotes = np.flatnonzero(buf == _QUOTE)
        if len(quotes) % 2:
            return False
        starts, ends = quotes[0::2] + 1, quotes[1::2]
        gap = starts[1:] - 1 - (ends[:-1] + 1)
        after = np.minimum(ends[:-1] + 2, len(buf) - 1)
        if not ((buf[ends[:-1] + 1] == ord(",")) & ((gap == 1) | ((gap == 2) & (buf[after] == ord(" "))))).all():
            return False
        self.buf, self.starts, self.ends = buf, starts, ends
        return True

    def _load_json(self, raw: bytes) -> list[str]:
        try:
            names = json.loads(raw)
        except ValueError as e:
            raise EvaluationInputError(f"{self.path}: not valid JSON ({e})") from None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise EvaluationInputError(f"{self.path} must be a JSON list of puzzle names")
        return names

    def _from_names(self, names: list[str]) -> None:
        encoded = [name.encode() for name in names]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        self.ends = np.cumsum(lengths)
        self.starts = self.ends - lengths
        self.buf = np.frombuffer(b"".join(encoded), dtype=np.uint8)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> str:
        return self.buf[self.starts[i]:self.ends[i]].tobytes().decode()

    def index(self, name: str) -> int:
        """The identifier of a name (a linear scan: for the renderer, not the vote)."""
        target = np.frombuffer(name.encode(), dtype=np.uint8)
        for i in np.flatnonzero(self.ends - self.starts == len(target)).tolist():
            if np.array_equal(self.buf[self.starts[i]:self.ends[i]], target):
                return i
        raise KeyError(name)
