"""Optional compiled packages (nvdiffrast, tiny-cuda-nn): imported once, None when absent."""

from __future__ import annotations

import functools
import importlib
import logging
from types import ModuleType

log = logging.getLogger(__name__)


@functools.cache
def optional_module(name: str) -> ModuleType | None:
    """The module ``name`` if it imports, else None (cached). Any failure counts as absent:
    an ImportError, or a CUDA extension that fails to build or load without a usable GPU."""
    try:
        return importlib.import_module(name)
    except Exception as exc:
        log.debug("%s unavailable: %s", name, exc)
        return None
