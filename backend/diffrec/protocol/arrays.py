"""Arrays on the wire: the dtype whitelist, descriptors and strict checks.

An array travels as one raw frame (little-endian, C order) described in the header by
``{"name": str, "dtype": str, "shape": [int, ...]}``. Only the dtypes in ``DTYPES`` exist on the
wire; byte sizes are computed with ``math.prod`` (``np.prod`` overflows silently).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .errors import ProtocolError
from .limits import MAX_DIM, MAX_NDIM

DTYPES: dict[str, np.dtype] = {
    "uint8": np.dtype("<u1"),
    "uint16": np.dtype("<u2"),
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
    "float16": np.dtype("<f2"),
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
}
NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}\Z")


def wire_dtype(array: np.ndarray) -> str:
    """The wire name of ``array``'s dtype (byte order ignored); ProtocolError if not allowed."""
    for name, dtype in DTYPES.items():
        if array.dtype.kind == dtype.kind and array.dtype.itemsize == dtype.itemsize:
            return name
    raise ProtocolError("bad_dtype", f"dtype {array.dtype} cannot travel; use {list(DTYPES)}")


def to_wire(array: np.ndarray) -> tuple[str, list[int], memoryview]:
    """(dtype name, shape, flat byte view) of ``array``, copying only if it is not already
    little-endian and C-contiguous."""
    name = wire_dtype(array)
    flat = np.ascontiguousarray(array, dtype=DTYPES[name]).reshape(-1)
    return name, list(array.shape), memoryview(flat.view(np.uint8))


def shape_problem(shape: object) -> str | None:
    """Why ``shape`` is not a wire shape (a list of at most MAX_NDIM ints in [0, MAX_DIM]), or
    None."""
    if not isinstance(shape, list) or len(shape) > MAX_NDIM:
        return f"must be a list of at most {MAX_NDIM} dimensions"
    for dim in shape:
        if type(dim) is not int or not 0 <= dim <= MAX_DIM:
            return f"has a bad dimension {dim!r} (each is an integer from 0 to {MAX_DIM})"
    return None


def check_descriptor(desc: object) -> tuple[str, np.dtype, tuple[int, ...], int]:
    """Validate one header array descriptor; returns (name, dtype, shape, byte size)."""
    if not isinstance(desc, dict) or set(desc) != {"name", "dtype", "shape"}:
        raise ProtocolError("bad_message", "an array descriptor is {name, dtype, shape}")
    name, dtype, shape = desc["name"], desc["dtype"], desc["shape"]
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ProtocolError("bad_message", f"bad array name {name!r}")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ProtocolError("bad_dtype", f"array {name}: dtype {dtype!r} not in {list(DTYPES)}")
    why = shape_problem(shape)
    if why:
        raise ProtocolError("bad_message", f"array {name}: shape {why}")
    nbytes = math.prod(shape) * DTYPES[dtype].itemsize
    return name, DTYPES[dtype], tuple(shape), nbytes


def from_frame(dtype: np.dtype, shape: tuple[int, ...], buffer) -> np.ndarray:
    """A read-only array over ``buffer`` (whose length the caller has checked); copied when the
    buffer is not aligned for the dtype, so it can go to torch safely after ``np.array(..)``."""
    array = np.frombuffer(buffer, dtype=dtype).reshape(shape)
    if array.ctypes.data % dtype.alignment:
        array = array.copy()
    return array


@dataclass(frozen=True)
class ArraySpec:
    """What an array must look like: allowed dtypes, ndim, fixed trailing dims (None = any),
    finite values, a non-empty first axis, and ``values(array)``: what is wrong with the
    values (a phrase), None when they make sense."""

    dtypes: tuple[str, ...]
    ndim: int
    trailing: tuple[int | tuple[int, ...] | None, ...] = ()
    finite: bool = False
    nonempty: bool = True
    values: Callable[[np.ndarray], str | None] | None = None

    def check_layout(self, name: str, dtype: str, shape: tuple[int, ...]) -> None:
        """Check dtype and shape alone (before any array is built from a frame)."""
        def fail(why: str):
            raise ProtocolError("invalid_input", f"array {name!r}: {why}")

        if dtype not in self.dtypes:
            fail(f"dtype {dtype} must be one of {list(self.dtypes)}")
        if len(shape) != self.ndim:
            fail(f"must have {self.ndim} dimensions, got shape {list(shape)}")
        first = self.ndim - len(self.trailing)
        for axis, want in enumerate(self.trailing, start=first):
            allowed = (want,) if isinstance(want, int) else want
            if want is not None and shape[axis] not in allowed:
                fail(f"axis {axis} must be {want}, got shape {list(shape)}")
        if self.nonempty and math.prod(shape) == 0:
            fail("is empty")

    def check(self, name: str, array: np.ndarray) -> None:
        """Check layout and values; raise ProtocolError('invalid_input', ...) naming the fault."""
        self.check_layout(name, wire_dtype(array), array.shape)
        if self.finite and array.dtype.kind == "f" and not np.isfinite(array).all():
            raise ProtocolError("invalid_input", f"array {name!r} contains NaN or infinite values")
        why = self.values(array) if self.values else None
        if why:
            raise ProtocolError("invalid_input", f"array {name!r}: {why}")
