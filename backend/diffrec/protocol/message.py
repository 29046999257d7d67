"""Messages: one UTF-8 JSON header frame followed by one raw frame per array.

``encode`` builds the frame list (arrays as zero-copy memoryviews); ``decode`` validates a
received frame list against a schema table before it builds any array.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .arrays import check_descriptor, from_frame, to_wire
from .errors import ProtocolError
from .file_checks import json_depth
from .limits import MAX_ARRAYS, MAX_HEADER_BYTES, MAX_INLINE_BYTES, MAX_JSON_DEPTH
from .schema import Schema


@dataclass
class Message:
    """A decoded message: ``op``, the other header fields, and the arrays by name (read-only
    views over the received frames; copy them before writing or handing them to torch).
    ``event``: an ``event`` message's typed event (``events.Event``), which the client's
    channel reads (``channel.typed``); None otherwise."""

    op: str
    fields: dict
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    event: object | None = None

    def get(self, key: str, default=None):
        return self.fields.get(key, default)

    def __getitem__(self, key: str):
        return self.fields[key]

    def __contains__(self, key: str) -> bool:
        return key in self.fields


def encode(op: str, fields: Mapping | None = None, arrays: Mapping | None = None) -> list:
    """Frames for one message. Raises ProtocolError('too_large') when a limit would be broken."""
    header = {"op": op, **(fields or {})}
    frames: list = [b""]
    if arrays:
        if len(arrays) > MAX_ARRAYS:
            raise ProtocolError("too_large", f"{len(arrays)} arrays; at most {MAX_ARRAYS}")
        descriptors = []
        for name, array in arrays.items():
            dtype, shape, buffer = to_wire(np.asarray(array))
            if buffer.nbytes > MAX_INLINE_BYTES:
                raise ProtocolError("too_large", f"array {name} over {MAX_INLINE_BYTES} bytes")
            descriptors.append({"name": name, "dtype": dtype, "shape": shape})
            frames.append(buffer)
        header["arrays"] = descriptors
    frames[0] = json.dumps(header, allow_nan=False, separators=(",", ":")).encode()
    if len(frames[0]) > MAX_HEADER_BYTES:
        raise ProtocolError("too_large", f"header over {MAX_HEADER_BYTES} bytes")
    return frames


def _buffer(frame) -> memoryview:
    buffer = getattr(frame, "buffer", None)
    return buffer if buffer is not None else memoryview(frame)


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")


class _KeyTwice(ValueError):
    """A JSON object in a header gives ``key`` twice."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object whose keys are each given once (``{"op": "ping", "op": "status"}`` would
    otherwise be read as its last); ``_KeyTwice`` else."""
    header, seen = dict(pairs), set()
    if len(header) != len(pairs):
        for key, _ in pairs:
            if key in seen:
                raise _KeyTwice(key)
            seen.add(key)
    return header


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} overflows a double")
    return value


def decode(frames: Sequence, schemas: Mapping[str, Schema]) -> Message:
    """Validate and decode ``frames`` (bytes or zmq.Frame). Any fault raises ProtocolError;
    its ``request_id`` attribute holds the header's ``id`` (or ``re``) when one was readable."""
    request_id = None
    try:
        if not frames:
            raise ProtocolError("bad_message", "empty message")
        head = _buffer(frames[0])
        if head.nbytes > MAX_HEADER_BYTES:
            raise ProtocolError("too_large", f"header over {MAX_HEADER_BYTES} bytes")
        try:
            header = json.loads(bytes(head).decode("utf-8"), parse_constant=_no_constants,
                                parse_float=_finite_float, object_pairs_hook=_unique_keys)
        except _KeyTwice as exc:
            raise ProtocolError("bad_message", f"header gives the key {exc.key[:40]!r} "
                                "twice") from None
        except (ValueError, RecursionError) as exc:
            raise ProtocolError("bad_message", f"header is not UTF-8 JSON ({exc})") from None
        if not isinstance(header, dict):
            raise ProtocolError("bad_message", "header must be a JSON object")
        rid = header.get("id", header.get("re"))
        request_id = rid if type(rid) is int else None
        if json_depth(header) > MAX_JSON_DEPTH:
            raise ProtocolError("bad_message", f"header nests objects or lists more than "
                                f"{MAX_JSON_DEPTH} deep")
        op = header.get("op")
        if not isinstance(op, str):
            raise ProtocolError("bad_message", "header needs a string 'op'")
        schema = schemas.get(op)
        if schema is None:
            raise ProtocolError("unknown_op", f"unknown op {op[:40]!r}")
        descriptors = header.get("arrays", [])
        if not isinstance(descriptors, list) or len(descriptors) > MAX_ARRAYS:
            raise ProtocolError("bad_message", f"'arrays' must be a list of ≤ {MAX_ARRAYS}")
        if len(descriptors) != len(frames) - 1:
            raise ProtocolError(
                "bad_message", f"{len(descriptors)} arrays described, {len(frames) - 1} frames sent"
            )
        schema.check_fields(op, header)
        layouts = [check_descriptor(d) for d in descriptors]
        if len({name for name, *_ in layouts}) != len(layouts):
            raise ProtocolError("bad_message", "array names must be unique")
        schema.check_arrays(op, [(d["name"], d["dtype"], tuple(d["shape"])) for d in descriptors])
        arrays = {}
        for (name, dtype, shape, nbytes), frame in zip(layouts, frames[1:], strict=True):
            buffer = _buffer(frame)
            if nbytes > MAX_INLINE_BYTES:
                raise ProtocolError("too_large", f"array {name}: {nbytes} bytes, over the "
                                    f"{MAX_INLINE_BYTES} a frame may carry")
            if buffer.nbytes != nbytes:
                raise ProtocolError(
                    "bad_message", f"array {name}: {buffer.nbytes} bytes, its shape says {nbytes}"
                )
            arrays[name] = from_frame(dtype, shape, buffer)
        fields = {k: v for k, v in header.items() if k not in ("op", "arrays")}
        return Message(op, fields, arrays)
    except ProtocolError as exc:
        exc.request_id = request_id
        raise
