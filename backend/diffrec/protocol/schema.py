"""Header schemas: every header is checked against one of these before any array is built.

``REQUESTS`` are what a client may send, ``SERVER_MESSAGES`` what a server may send. A schema
names each field's JSON type, whether it is required and a check returning an error sentence
or None; request schemas reject unknown fields, server-message schemas ignore them (newer
servers may add fields). ``INPUTS`` fixes the layout of the well-known job inputs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .arrays import DTYPES, ArraySpec, shape_problem
from .errors import ProtocolError
from .events import FINAL_STATES
from .limits import CHUNK_BYTES, MAX_ARRAYS, MAX_BLOB_BYTES

JOB_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
CONTENT_HASH_RE = re.compile(r"[0-9a-f]{64}\Z")
FILE_NAME_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}\Z")
EVENT_KINDS = ("progress", "preview", "log", *FINAL_STATES)
"""The kinds of job event a server sends (``events``; ``Started`` never goes on the wire)."""
MAX_REQUEST_ID = 2**53

Check = Callable[[object], "str | None"]


def _matches(pattern: re.Pattern, what: str) -> Check:
    return lambda v: None if pattern.match(v) else f"is not a valid {what}"


def _between(lo: int, hi: int) -> Check:
    return lambda v: None if lo <= v <= hi else f"must be in [{lo}, {hi}]"


def _one_of(options: tuple[str, ...]) -> Check:
    return lambda v: None if v in options else f"must be one of {list(options)}"


@dataclass(frozen=True)
class Field:
    """One header field: JSON type (``int`` excludes bool), required, optional extra check."""

    kind: type | tuple[type, ...]
    required: bool = True
    check: Check | None = None


@dataclass(frozen=True)
class Schema:
    """The fields of one op, and which raw frames it may carry (None: any names, checked later
    by the receiver; otherwise exactly these names)."""

    fields: dict[str, Field] = field(default_factory=dict)
    arrays: dict[str, ArraySpec] | None = field(default_factory=dict)
    strict: bool = True

    def check_fields(self, op: str, header: dict) -> None:
        for name, spec in self.fields.items():
            if name not in header:
                if spec.required:
                    raise ProtocolError("bad_request", f"{op}: field {name!r} is required")
                continue
            value = header[name]
            kinds = spec.kind if isinstance(spec.kind, tuple) else (spec.kind,)
            if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
                raise ProtocolError("bad_request", f"{op}: field {name!r} has the wrong type")
            why = spec.check(value) if spec.check else None
            if why:
                raise ProtocolError("bad_request", f"{op}: field {name!r} {why}")
        if self.strict:
            unknown = set(header) - set(self.fields) - {"op", "arrays"}
            if unknown:
                raise ProtocolError("bad_request", f"{op}: unknown fields {sorted(unknown)[:5]}")

    def check_arrays(self, op: str, layouts: list[tuple[str, str, tuple[int, ...]]]) -> None:
        if self.arrays is None:
            return
        names = [name for name, _, _ in layouts]
        if sorted(names) != sorted(self.arrays):
            wants = list(self.arrays)
            raise ProtocolError("bad_request", f"{op}: carries arrays {names}, wants {wants}")
        for name, dtype, shape in layouts:
            self.arrays[name].check_layout(name, dtype, shape)


REQUEST_ID = Field(int, check=_between(0, MAX_REQUEST_ID))
JOB = Field(str, check=_matches(JOB_ID_RE, "job id (1-64 of A-Z a-z 0-9 _ -)"))
BLOB = Field(str, check=_matches(CONTENT_HASH_RE, "content hash (64 lowercase hex digits)"))
BLOB_SIZE = Field(int, check=_between(0, MAX_BLOB_BYTES))
OFFSET = Field(int, check=_between(0, MAX_BLOB_BYTES))
BYTES = {"data": ArraySpec(("uint8",), ndim=1, nonempty=False)}


def _request(arrays: dict | None = None, **fields: Field) -> Schema:
    return Schema({"id": REQUEST_ID, **fields}, {} if arrays is None else arrays)


def _inputs_check(value: dict) -> str | None:
    if len(value) > MAX_ARRAYS:
        return f"has more than {MAX_ARRAYS} inputs"
    for name, ref in value.items():
        if not isinstance(ref, dict) or set(ref) != {"blob", "dtype", "shape"}:
            return f"entry {name!r} must be {{blob, dtype, shape}}"
        if not isinstance(ref["blob"], str) or not CONTENT_HASH_RE.match(ref["blob"]):
            return f"entry {name!r} has a bad blob id"
        if not isinstance(ref["dtype"], str) or ref["dtype"] not in DTYPES:
            return f"entry {name!r} has a dtype outside {list(DTYPES)}"
        why = shape_problem(ref["shape"])
        if why:
            return f"entry {name!r}: shape {why}"
    return None


REQUESTS: dict[str, Schema] = {
    "ping": _request(),
    "submit": Schema(
        {
            "id": REQUEST_ID,
            "job": JOB,
            "spec": Field(dict),
            "inputs": Field(dict, required=False, check=_inputs_check),
        },
        arrays=None,
    ),
    "status": _request(job=JOB),
    "list": _request(cursor=Field(int, required=False, check=_between(0, 2**53))),
    "attach": _request(job=JOB),
    "detach": _request(job=JOB),
    "cancel": _request(job=JOB),
    "delete": _request(job=JOB),
    "resume": _request(job=JOB),
    "fetch": _request(job=JOB),
    "read": _request(
        job=JOB,
        file=Field(str, check=_matches(FILE_NAME_RE, "file name")),
        offset=OFFSET,
        length=Field(int, check=_between(1, CHUNK_BYTES)),
    ),
    "upload": _request(blob=BLOB, size=BLOB_SIZE),
    "chunk": _request(BYTES, blob=BLOB, size=BLOB_SIZE, offset=OFFSET),
}

_RE = Field((int, type(None)))
SERVER_MESSAGES: dict[str, Schema] = {
    "reply": Schema({"re": REQUEST_ID}, arrays=None, strict=False),
    "error": Schema({"re": _RE, "code": Field(str), "message": Field(str)}, strict=False),
    "ack": Schema(
        {"re": REQUEST_ID, "blob": BLOB, "offset": OFFSET, "complete": Field(bool)}, strict=False
    ),
    "data": Schema({"re": REQUEST_ID, "offset": OFFSET}, BYTES, strict=False),
    "event": Schema({"job": JOB, "kind": Field(str, check=_one_of(EVENT_KINDS))}, None, False),
    "heartbeat": Schema({"time": Field((int, float))}, strict=False),
}

def _alpha_range(images) -> str | None:
    """Float images' alpha must lie in [0, 1] (integer images' always does)."""
    if images.dtype.kind != "f" or images.shape[-1] != 4:
        return None
    low, high = float(images[..., 3].min()), float(images[..., 3].max())
    if low < 0 or high > 1:
        return f"alpha must lie in [0, 1], found {low:.4g} .. {high:.4g}"
    return None


def _unit_interval(values) -> str | None:
    """Every value in [0, 1]."""
    low, high = float(np.min(values)), float(np.max(values))
    if low < 0 or high > 1:
        return f"values must lie in [0, 1], found {low:.4g} .. {high:.4g}"
    return None


def _refractive_index(values) -> str | None:
    """Every value at least 1 (vacuum's)."""
    low = float(np.min(values))
    if low < 1:
        return f"an index of refraction is at least 1, found {low:.4g}"
    return None


def _camera_matrices(cameras) -> str | None:
    """Each matrix must be affine (last row 0 0 0 1) with an invertible 3x3 part."""
    matrices = np.asarray(cameras, dtype=np.float64)
    affine = np.abs(matrices[:, 3] - (0, 0, 0, 1)).max(axis=-1) < 1e-6
    scale = np.abs(np.linalg.det(matrices[:, :3, :3]))
    bad = np.flatnonzero(~affine | (scale < 1e-9))
    if bad.size:
        return (f"camera {bad[0]} is not a camera-to-world matrix (its last row must be "
                "0 0 0 1 and its 3x3 part a rotation, which is invertible)")
    return None


def _camera_intrinsics(intrinsics) -> str | None:
    """fx, fy > 0 (pixels); 0 < near < far."""
    values = np.asarray(intrinsics, dtype=np.float64)
    bad = np.flatnonzero((values[:, :2] <= 0).any(axis=-1) | (values[:, 4] <= 0)
                         | (values[:, 5] <= values[:, 4]))
    if bad.size:
        fx, fy, _, _, near, far = values[bad[0]]
        return (f"camera {bad[0]} has fx {fx:g}, fy {fy:g}, near {near:g}, far {far:g}: focal "
                "lengths must be positive and 0 < near < far")
    return None


_FLOATS = ("float16", "float32", "float64")
INPUTS: dict[str, ArraySpec] = {
    # target images (N, H, W, 3|4): straight alpha, rows top-down; float: scene-linear, alpha
    # in [0, 1]; uint8 / uint16: sRGB-encoded colour, linear alpha
    "images": ArraySpec(("uint8", "uint16", *_FLOATS), 4, (None, None, (3, 4)), finite=True,
                        values=_alpha_range),
    # camera-to-world matrices (N, 4, 4), Blender's convention
    "cameras": ArraySpec(("float32", "float64"), 3, (4, 4), finite=True,
                         values=_camera_matrices),
    # per camera fx, fy, cx, cy (pixels), near, far
    "intrinsics": ArraySpec(("float32", "float64"), 2, (6,), finite=True,
                            values=_camera_intrinsics),
    "vertices": ArraySpec(("float32", "float64"), 2, (3,), finite=True),
    "faces": ArraySpec(("int32", "int64"), 2, (3,)),
    # texture coordinates (U, 2), origin bottom-left, indexed per triangle corner by uv_faces
    "uvs": ArraySpec(("float32", "float64"), 2, (2,), finite=True),
    "uv_faces": ArraySpec(("int32", "int64"), 2, (3,)),
    # shading normals (N, 3), unit, world, indexed per triangle corner by normal_faces
    # (flat faces and hard edges as the mesh shades; left out: smooth vertex normals)
    "normals": ArraySpec(("float32", "float64"), 2, (3,), finite=True),
    "normal_faces": ArraySpec(("int32", "int64"), 2, (3,)),
    # equirectangular environment map (H, W, 3), scene-linear
    "envmap": ArraySpec(_FLOATS, 3, (3,), finite=True),
    # start textures (H, W, 3) over the base mesh's UVs, rows top-down as images (row 0 at
    # v = 1): linear base colour; occlusion (0: none), roughness, metallic; a tangent-space
    # normal map encoded (n + 1) / 2, OpenGL (+Y along increasing v)
    "start_kd": ArraySpec(_FLOATS, 3, (3,), finite=True),
    "start_ks": ArraySpec(_FLOATS, 3, (3,), finite=True),
    "start_normal": ArraySpec(_FLOATS, 3, (3,), finite=True),
    # the start's clear coat over the whole surface (2,): weight, roughness, each in [0, 1]
    "start_coat": ArraySpec(_FLOATS, 1, (2,), finite=True, values=_unit_interval),
    # the start's index of refraction over the whole surface (1,): at least 1
    "start_ior": ArraySpec(_FLOATS, 1, (1,), finite=True, values=_refractive_index),
    # start renders (N, H, W, 4): the base mesh with its start material rendered by the
    # targets' renderer, one per target image, same order and size; laid out as images
    "start_images": ArraySpec(("uint8", "uint16", *_FLOATS), 4, (None, None, 4), finite=True,
                              values=_alpha_range),
}
