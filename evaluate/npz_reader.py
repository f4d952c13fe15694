"""Read the arrays of an .npz straight from the file, in row ranges, into buffers of our choosing.

``np.load(...)[key]`` reads a stored zip member in 256 KB pieces through ``zipfile`` (which also
computes its CRC): 1.7 s for the 700 MB of a full ARC-AGI-1 evaluation, and always a full copy of
each array. A stored (uncompressed, ``np.savez``) member is just an .npy file at an offset inside the
zip, so we read its rows with ``readinto``: predictions go straight into the vote's one big array and
inputs are streamed in chunks. Compressed members (``np.savez_compressed``) fall back to ``np.load``.
"""
from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import numpy as np

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")    # zip local file header, 30 bytes


class NpzArray:
    """One array of an .npz file: shape, dtype, and reads of row ranges."""

    def __init__(self, path: Path, key: str, info: zipfile.ZipInfo):
        self.path, self.key = Path(path), key
        self._loaded = None
        if info.compress_type == zipfile.ZIP_STORED:
            with open(path, "rb") as f:
                f.seek(info.header_offset)
                fields = _LOCAL_HEADER.unpack(f.read(_LOCAL_HEADER.size))
                f.seek(fields[9] + fields[10], 1)          # skip file name and extra field
                version = np.lib.format.read_magic(f)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                self.shape, fortran, self.dtype = read_header(f)
                self._offset = f.tell()
            if fortran and len(self.shape) > 1:
                self._load()                               # rows are not contiguous on disk
        else:
            self._load()

    def _load(self):
        with np.load(self.path) as npz:
            self._loaded = npz[self.key]
        self.shape, self.dtype = self._loaded.shape, self._loaded.dtype

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    def read(self, start: int = 0, stop: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """Rows ``start:stop``, into ``out`` when given (C-contiguous, matching dtype and shape)."""
        stop = self.shape[0] if stop is None else stop
        shape = (stop - start,) + tuple(self.shape[1:])
        if out is None:
            out = np.empty(shape, dtype=self.dtype)
        if self._loaded is not None:
            out[...] = self._loaded[start:stop]
            return out
        assert out.shape == shape and out.dtype == self.dtype and out.flags.c_contiguous
        with open(self.path, "rb", buffering=0) as f:
            f.seek(self._offset + start * self.row_bytes)
            view, done = memoryview(out.reshape(-1).view(np.uint8)), 0
            while done < len(view):
                got = f.readinto(view[done:])
                if not got:
                    raise EOFError(f"{self.path}: array {self.key!r} is truncated")
                done += got
        return out


def open_npz(path: Path) -> dict[str, NpzArray]:
    """The arrays of an .npz by name (``"preds"`` for the member ``preds.npy``); nothing read yet."""
    with zipfile.ZipFile(path) as zf:
        infos = [i for i in zf.infolist() if i.filename.endswith(".npy")]
    return {i.filename[:-4]: NpzArray(path, i.filename[:-4], i) for i in infos}
