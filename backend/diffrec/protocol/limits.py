"""Protocol version and the limits both sides enforce (see docs/protocol.md, "Limits")."""

PROTOCOL_VERSION = 6

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

CHUNK_BYTES = 4 * MIB
"""Payloads larger than this travel as a blob, in chunks of at most this many bytes."""

HASH_BLOCK_BYTES = 4 * MIB
"""Block size of the content hash that names a blob or result file (part of its definition:
changing it changes every name)."""

WINDOW_CHUNKS = 8
"""Credit: how many chunks a sender may have in flight before the receiver acknowledges."""

MAX_HEADER_BYTES = 64 * KIB
MAX_JSON_DEPTH = 32
"""Deepest nesting of objects and lists in a header (a spec needs a few levels)."""
MAX_MESSAGE_CHARS = 4096
"""Longest ``message`` a server sends in an event (longer ones are cut, ending in "…")."""
MAX_ARRAYS = 64
"""Raw frames after the header in one message, and inputs per job."""

MAX_INLINE_BYTES = CHUNK_BYTES
"""Largest raw frame a message may carry inline."""

MAX_FRAME_BYTES = CHUNK_BYTES + MAX_HEADER_BYTES
"""The socket's ZMQ_MAXMSGSIZE (per frame): a peer sending a bigger frame is disconnected."""

PEER_BUDGET_BYTES = (WINDOW_CHUNKS + 2) * MAX_FRAME_BYTES
"""Bytes of one connection's messages the server's transport holds at most before it reads
no more from it (beyond one more frame): the frames of messages not yet read, finished or
not. A client within its window of chunks never reaches it."""

TOTAL_BUDGET_BYTES = 1 * GIB
"""The same, for all connections together: beyond it the biggest unauthenticated holder is
closed (no connection is held back for the others' bytes)."""

ADDRESS_BUDGET_BYTES = 256 * MIB
"""The same, for the unauthenticated connections from one address together (all of them
without CURVE); beyond it the biggest of them is closed."""

REPLY_BUDGET_BYTES = PEER_BUDGET_BYTES
"""Bytes of replies and events queued for one connection (sent by the server, not yet taken
by the client) beyond which more are dropped. A client that reads its window of chunks never
reaches it."""

TOTAL_REPLY_BUDGET_BYTES = 1 * GIB
"""The same, for all connections together: beyond it the unauthenticated connection with the
most queued is closed."""

GATE_IDLE_S = 60.0
"""A connection with an unfinished message that neither sends nor is served this long is
closed (its frames freed)."""

MAX_BLOB_BYTES = 64 * GIB
MAX_NDIM = 6
MAX_DIM = 2**31 - 1

HEARTBEAT_S = 1.0
"""The server sends a heartbeat to every attached client this often; clients ping as often."""

PEER_TIMEOUT_S = 10.0
"""A client silent this long loses its subscriptions; a server silent this long is presumed dead."""

STOPPED_AFTER_S = 3 * HEARTBEAT_S
"""A server that has not answered a client's request for this long (wall clock) is reported
stopped to the one following a job; it goes on following, and attaches again when it answers."""
