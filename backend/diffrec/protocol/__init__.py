"""The diffrec wire protocol (docs/protocol.md), one implementation for both sides.

Depends on the standard library, numpy and pyzmq only, and imports nothing outside this
package, so the Blender add-on can vendor it as is. The parts that need pyzmq (the client and
the keys) load on first use, so ``events``, ``settings`` and the rest import without it.
"""

from importlib import import_module

from . import captures, events, images, liveness, manifest, settings, uv_layout
from .arrays import DTYPES, ArraySpec
from .errors import JobLost, ProtocolError, ServerError, ServerUnavailable
from .limits import PROTOCOL_VERSION
from .manifest import ManifestError
from .message import Message, decode, encode
from .schema import INPUTS, REQUESTS, SERVER_MESSAGES

__all__ = [
    "DTYPES",
    "INPUTS",
    "PROTOCOL_VERSION",
    "REQUESTS",
    "SERVER_MESSAGES",
    "ArraySpec",
    "Client",
    "JobLost",
    "ManifestError",
    "Message",
    "ProtocolError",
    "ServerError",
    "ServerUnavailable",
    "captures",
    "decode",
    "encode",
    "events",
    "images",
    "liveness",
    "manifest",
    "pairing_string",
    "parse_pairing",
    "read_keypair",
    "settings",
    "uv_layout",
    "write_keypair",
]

_NEEDS_ZMQ = {"Client": "client", "pairing_string": "keys",
              "parse_pairing": "keys", "read_keypair": "keys", "write_keypair": "keys"}


def __getattr__(name: str):
    """The names that need pyzmq, imported when first asked for."""
    if name not in _NEEDS_ZMQ:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_NEEDS_ZMQ[name]}", __name__), name)
