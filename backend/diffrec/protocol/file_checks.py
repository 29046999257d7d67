"""Files read without trusting what they claim: JSON with a nesting limit, ``.npy`` arrays
whose header is checked against the file's size before anything is allocated (numpy only).

Every reader of such a file goes through here (a dataset's ``transforms_*.json`` and
``poses_bounds.npy``, a job file and its arrays, a result's ``manifest.json``, a settings file,
a glTF's JSON), so that a file nested 100,000 deep or an ``.npy`` claiming a shape of
(100000, 100000, 4) is one sentence (``FileCheckError``, a ValueError), never a
RecursionError or a MemoryError.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

MAX_FILE_JSON_DEPTH = 64
"""Deepest nesting of objects and lists a JSON file may have; the deepest diffrec writes or
reads is a glTF's extras (under 10)."""


class FileCheckError(ValueError):
    """A file that cannot be what it claims; the message names it and says why."""


def json_depth(value) -> int:
    """How deep ``value`` (decoded JSON) nests objects and lists (a scalar: 0), found without
    recursion."""
    depth, level = 0, [value]
    while level:
        level = [item for node in level if isinstance(node, dict | list)
                 for item in (node.values() if isinstance(node, dict) else node)]
        depth += 1
    return depth - 1


def parse_json(text: str | bytes, where: str, max_depth: int = MAX_FILE_JSON_DEPTH):
    """The value of the JSON ``text`` read from ``where`` (a file's name, for the message);
    FileCheckError if it is not UTF-8 JSON or nests objects and lists over ``max_depth`` deep.
    This is the one place that catches json's RecursionError."""
    try:
        value = json.loads(text)
    except RecursionError:
        value, too_deep = None, True
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise FileCheckError(f"{where} is not valid JSON: {error}") from None
    else:
        too_deep = json_depth(value) > max_depth
    if too_deep:
        raise FileCheckError(f"{where} nests objects or lists more than {max_depth} deep, "
                             "more than any file diffrec reads needs: is it the right file?")
    return value


def read_json(path: str | Path, where: str | None = None):
    """``parse_json`` of the file ``path``; an unreadable file is a FileCheckError too."""
    try:
        text = Path(path).read_bytes()
    except OSError as error:
        raise FileCheckError(f"cannot read {where or path}: {error.strerror or error}") from None
    return parse_json(text, where or str(path))


def load_npy(path: str | Path, where: str | None = None) -> np.ndarray:
    """The array of the ``.npy`` file ``path`` (no pickles). Its header's shape and dtype are
    checked against the file's size first, so a header claiming more data than the file holds
    is a FileCheckError naming ``where`` (default: the path), not an allocation; so is a file
    that is not a whole ``.npy``."""
    where = where or str(path)
    try:
        with open(path, "rb") as stream:
            version = np.lib.format.read_magic(stream)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                           (2, 0): np.lib.format.read_array_header_2_0}.get(version)
            if read_header is None:
                raise ValueError(f"unsupported .npy format version {version}")
            shape, _, dtype = read_header(stream)
            available = os.fstat(stream.fileno()).st_size - stream.tell()
            if dtype.hasobject:
                raise ValueError("it holds Python objects, which are not loaded")
            claimed = math.prod(shape) * dtype.itemsize
            if claimed > available:
                raise FileCheckError(
                    f"{where}: its header claims a {dtype} array of shape {list(shape)} "
                    f"({claimed:,} bytes) but the file holds {available:,} bytes of data: "
                    "the file is cut short or its header is wrong")
            stream.seek(0)
            return np.load(stream, allow_pickle=False)
    except FileCheckError:
        raise
    except OSError as error:
        raise FileCheckError(f"cannot load {where}: {error.strerror or error}") from None
    except (ValueError, EOFError) as error:
        raise FileCheckError(f"cannot load {where} (is it a whole .npy file?): "
                             f"{' '.join(str(error).split())}") from None
