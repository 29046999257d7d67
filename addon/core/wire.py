"""The wire protocol package, ``diffrec.protocol``, without the rest of the backend.

A built extension carries a copy in the add-on's ``vendor/diffrec_protocol``
(scripts/build_extension). In the source tree it is loaded straight from
``backend/diffrec/protocol`` as a standalone package (it uses relative imports only), so the
add-on never imports ``diffrec`` itself, nor torch.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import threading
from pathlib import Path

_NAME = "diffrec_protocol"
_loading = threading.Lock()


@functools.cache
def protocol():
    """The protocol package, imported on first use (numpy only; its client and keys load
    pyzmq when first used). Safe from any thread: the first call may come from a job's worker
    thread while the main thread reads the presets, so one thread loads it while the other
    waits."""
    with _loading:
        return _load()


def _load():
    """The vendored copy, else the source tree's package loaded standalone."""
    vendored = Path(__file__).parents[1] / "vendor" / _NAME
    if (vendored / "__init__.py").exists():
        from ..vendor import diffrec_protocol

        return diffrec_protocol
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    source = Path(__file__).resolve().parents[2] / "backend" / "diffrec" / "protocol"
    spec = importlib.util.spec_from_file_location(
        _NAME, source / "__init__.py", submodule_search_locations=[str(source)]
    )
    if spec is None:
        raise ImportError(f"the diffrec protocol is neither vendored nor at {source}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_NAME]
        raise
    return module
