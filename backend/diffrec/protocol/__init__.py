"""The diffrec wire protocol (docs/protocol.md), one implementation for both sides.

Depends on the standard library, numpy and pyzmq only, and imports nothing outside this
package, so the Blender add-on can vendor it as is.
"""

from . import captures, manifest, settings
from .arrays import DTYPES, ArraySpec
from .client import TERMINAL_EVENTS, Client
from .errors import ProtocolError, ServerError, ServerUnavailable
from .keys import pairing_string, parse_pairing, read_keypair, write_keypair
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
    "TERMINAL_EVENTS",
    "ArraySpec",
    "Client",
    "ManifestError",
    "Message",
    "ProtocolError",
    "ServerError",
    "ServerUnavailable",
    "captures",
    "decode",
    "encode",
    "manifest",
    "pairing_string",
    "parse_pairing",
    "read_keypair",
    "settings",
    "write_keypair",
]
