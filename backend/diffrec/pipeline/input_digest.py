"""What a run trains on, as one digest: a checkpoint is tagged with it, so that a run started
again on other images, cameras, start mesh, material or light starts afresh instead of
resuming a fit of the old ones.

The digest reads the training views, the base mesh and its material, the given light and
the start renders to the byte (BLAKE2b over each tensor's dtype, shape and values); the
held-out views are left out, since no pass trains on them. About a second per gigabyte of
images, once per run.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import torch

from diffrec.pipeline.inputs import Inputs

TRAINED_ON = ("train", "base_mesh", "envmap", "base_material", "start_renders", "poses_found")
"""The fields of ``Inputs`` a pass's result depends on."""


def inputs_digest(inputs: Inputs) -> str:
    """A hex digest of what ``inputs`` gives the passes to train on (``TRAINED_ON``): equal
    for the same values, whatever device they are on."""
    hasher = hashlib.blake2b(digest_size=16)
    for name in TRAINED_ON:
        hasher.update(name.encode())
        _update(hasher, getattr(inputs, name))
    return hasher.hexdigest()


def _update(hasher, value) -> None:
    """Feed ``value`` (a tensor, a dataclass, a container or a plain value) to ``hasher``,
    its kind and structure with it, so that different values never read alike."""
    if isinstance(value, torch.Tensor):
        array = value.detach().cpu().contiguous().numpy()
        hasher.update(f"tensor {array.dtype} {array.shape}".encode())
        hasher.update(array.view(np.uint8).data)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        hasher.update(type(value).__name__.encode())
        for field in dataclasses.fields(value):
            hasher.update(field.name.encode())
            _update(hasher, getattr(value, field.name))
    elif isinstance(value, dict):
        hasher.update(f"dict {len(value)}".encode())
        for key in sorted(value):
            hasher.update(repr(key).encode())
            _update(hasher, value[key])
    elif isinstance(value, (list, tuple)):
        hasher.update(f"{type(value).__name__} {len(value)}".encode())
        for item in value:
            _update(hasher, item)
    elif value is None or isinstance(value, (bool, int, float, str)):
        hasher.update(f"{type(value).__name__} {value!r}".encode())
    else:
        raise TypeError(f"cannot digest a {type(value).__name__}")
