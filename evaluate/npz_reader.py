"""Read the arrays of an .npz straight from the file, in row ranges, into buffers of our choosing.

``np.load(...)[key]`` always makes a full copy of an array, and reads a member through ``zipfile``
(256 KB at a time, with a CRC pass): 1.7 s and 700 MB for the inputs and predictions of a full
ARC-AGI-1 evaluation, 10 s and 1 GB when they were written with ``np.savez_compressed``. Here:

* a stored member (``np.savez``) is an .npy file at an offset inside the zip: rows are read with
  ``readinto`` into the caller's buffer;
* a deflated member (``np.savez_compressed``) is inflated with zlib straight from the file, rows in
  order, into the caller's buffer, so memory stays one chunk however large the array.
"""
from __future__ import annotations

import struct
import tokenize
import zipfile
import zlib
from pathlib import Path

import numpy as np

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")    # zip local file header, 30 bytes
_READ_BLOCK = 1 << 20
# what numpy's .npy header parser raises for a damaged header besides ValueError: a header that is
# not a Python literal is tokenized again (its fallback for headers written by Python 2), and an
# unclosed bracket ends there, in a TokenError
NPY_HEADER_ERRORS = (ValueError, tokenize.TokenError)


def _member_data_offset(f, info: zipfile.ZipInfo) -> int:
    """Where a member's (possibly compressed) bytes start: after its local header, name and extra."""
    f.seek(info.header_offset)
    fields = _LOCAL_HEADER.unpack(f.read(_LOCAL_HEADER.size))
    return info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]


def read_npy_header(f) -> tuple[tuple, bool, np.dtype]:
    """(shape, fortran order, dtype) of the .npy header at the position of the file-like `f`,
    which it leaves at the start of the data; a damaged header is a ValueError."""
    version = np.lib.format.read_magic(f)
    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                   else np.lib.format.read_array_header_2_0)
    try:
        return read_header(f)
    except tokenize.TokenError as e:
        raise ValueError(f"cannot parse the .npy header ({e.args[0]})") from None


class _Inflater:
    """A deflated zip member as a sequential stream (no CRC pass: the file is ours, just written)."""

    def __init__(self, path: Path, offset: int):
        self._file = open(path, "rb")
        self._file.seek(offset)
        self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)      # raw deflate, as in zip files
        self.position = 0                                    # decompressed bytes handed out

    def readinto(self, view: memoryview) -> int:
        done = 0
        while done < len(view) and not self._zlib.eof:
            data = self._zlib.unconsumed_tail or self._file.read(_READ_BLOCK)
            out = self._zlib.decompress(data, len(view) - done)   # never more than asked for
            if not out and not data:
                break
            view[done:done + len(out)] = out
            done += len(out)
        self.position += done
        return done

    def read(self, n: int) -> bytes:
        buffer = bytearray(n)
        return bytes(buffer[:self.readinto(memoryview(buffer))])

    def close(self):
        self._file.close()


class NpzArray:
    """One array of an .npz file: shape, dtype, and reads of row ranges."""

    def __init__(self, path: Path, key: str, info: zipfile.ZipInfo):
        self.path, self.key, self._info = Path(path), key, info
        self._stream = None
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ValueError(f"{path}: member {info.filename} uses zip compression {info.compress_type}")
        with open(path, "rb") as f:
            self._member = _member_data_offset(f, info)
        if info.compress_type == zipfile.ZIP_STORED:
            with open(path, "rb") as f:
                f.seek(self._member)
                self.shape, fortran, self.dtype = read_npy_header(f)
                self._data = f.tell()
        else:
            stream = _Inflater(self.path, self._member)
            self.shape, fortran, self.dtype = read_npy_header(stream)
            self._data = stream.position               # offset of the data in the inflated member
            stream.close()
        if fortran and len(self.shape) > 1:
            raise ValueError(f"{path}: array {key!r} is stored in Fortran order; expected C order")

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    def read(self, start: int = 0, stop: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """Rows ``start:stop``, into ``out`` when given (C-contiguous, matching dtype and shape).
        Compressed arrays are fastest read in increasing row order (each array keeps its stream)."""
        stop = self.shape[0] if stop is None else stop
        shape = (stop - start,) + tuple(self.shape[1:])
        if out is None:
            out = np.empty(shape, dtype=self.dtype)
        if out.shape != shape or out.dtype != self.dtype or not out.flags.c_contiguous:
            raise ValueError(f"read buffer {out.shape} {out.dtype} does not fit rows {start}:{stop} of "
                             f"{self.key!r} {self.shape} {self.dtype}")
        view = memoryview(out.reshape(-1).view(np.uint8))
        if self._info.compress_type == zipfile.ZIP_STORED:
            with open(self.path, "rb", buffering=0) as f:
                f.seek(self._data + start * self.row_bytes)
                done = 0
                while done < len(view):
                    got = f.readinto(view[done:])
                    if not got:
                        break
                    done += got
        else:
            done = self._inflate_into(start, view)
        if done < len(view):
            raise EOFError(f"{self.path}: array {self.key!r} is truncated")
        return out

    def _inflate_into(self, start: int, view: memoryview) -> int:
        want = self._data + start * self.row_bytes
        if self._stream is None or self._stream.position > want:
            if self._stream is not None:
                self._stream.close()
            self._stream = _Inflater(self.path, self._member)
        skip = want - self._stream.position
        while skip > 0:                                  # only for reads out of order
            got = self._stream.readinto(memoryview(bytearray(min(skip, _READ_BLOCK))))
            if not got:
                break
            skip -= got
        return self._stream.readinto(view)

    def __del__(self):
        if self._stream is not None:
            self._stream.close()


def open_npz(path: Path) -> dict[str, NpzArray]:
    """The arrays of an .npz by name (``"preds"`` for the member ``preds.npy``); nothing read yet."""
    with zipfile.ZipFile(path) as zf:
        infos = [i for i in zf.infolist() if i.filename.endswith(".npy")]
    return {i.filename[:-4]: NpzArray(path, i.filename[:-4], i) for i in infos}
