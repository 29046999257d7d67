"""Reaching the backend from Blender: ``connector`` (a protocol Client factory made from the
preferences), ``check`` (a ping within two seconds, before any work) and the connection
operators (Test Connection, the client key pair)."""

from __future__ import annotations

import bpy

from . import preferences
from .core import connection, messages

CHECK_BUDGET_S = 2.0
"""How long ``check`` waits for the backend's answer before saying what is wrong."""
ASK_BUDGET_S = 2.0
"""How long a question asked on the main thread (the Jobs list's Refresh, Remove...) waits for
the backend's answer: Blender's interface waits as long."""


def _target(context) -> tuple[connection.Endpoint, tuple[str, str] | None]:
    """The endpoint of the preferences and, for a paired server, this computer's key pair.
    Raises ValueError or ProtocolError('bad_pairing') for a mistyped endpoint, PermissionError
    when Blender is offline and the endpoint is not on this computer."""
    target = connection.endpoint(preferences.setting("endpoint", context) or "")
    connection.check_online_access(target, bpy.app.online_access)
    keypair = None
    if target.server_key:
        keypair = connection.client_keypair(preferences.user_directory())
    return target, keypair


def check(context) -> dict | None:
    """The backend's ping reply within CHECK_BUDGET_S, or None when nothing listened and a
    local backend was started now (Start a local backend; the job's connection waits for it).
    Raises ``connection.Unreachable`` (and ``_target``'s errors) with a sentence to show."""
    target, keypair = _target(context)
    try:
        return connection.reach(target, keypair, CHECK_BUDGET_S)
    except connection.Unreachable:
        if not (preferences.setting("auto_start", context) and target.is_loopback
                and not connection.listening(target, 0.1)):
            raise
    connection.start_local_backend(preferences.setting("python", context), target.address,
                                   preferences.user_directory() / "backend")
    return None


def connector(context, budget_s: float | None = None):
    """A function making a protocol Client from the preferences. Everything it needs is read
    here, on the main thread; the function itself never touches bpy (worker threads call it).
    ``budget_s``: each request's Client gives up after this many seconds (ServerUnavailable),
    and connecting raises ``connection.Unreachable`` at once when nothing listens (no local
    backend is started): for questions asked on the main thread."""
    from .core.wire import protocol

    target, keypair = _target(context)
    timeout = preferences.setting("timeout", context)
    auto_start = preferences.setting("auto_start", context) and target.is_loopback
    python = preferences.setting("python", context)
    data_dir = preferences.user_directory() / "backend"

    def connect():
        if budget_s is not None and not connection.listening(target, budget_s / 2):
            raise connection.Unreachable(connection.nothing_listening(target))
        if budget_s is None and auto_start and not connection.listening(target, 1.0):
            connection.start_local_backend(python, target.address, data_dir)
        return protocol().Client(
            target.address,
            server_key=target.server_key,
            client_keypair=keypair,
            timeout=timeout if budget_s is None else min(timeout, budget_s),
            retry_for=max(30.0, 3 * timeout) if budget_s is None else budget_s,
        )

    return connect


class DIFFREC_OT_test_connection(bpy.types.Operator):
    """Ask the backend for its protocol version, device and free memory"""

    bl_idname = "diffrec.test_connection"
    bl_label = "Test Connection"

    @messages.reported
    def execute(self, context):
        reply = check(context)
        if reply is None:
            self.report({"INFO"}, "Starting the local backend: test again in a minute.")
            return {"FINISHED"}
        free = reply.get("gpu_free_bytes")
        memory = f", {free / 2**30:.1f} GiB free" if free else ""
        self.report(
            {"INFO"},
            f"diffrec {reply.get('server')} (protocol {reply['protocol']}) on "
            f"{reply.get('engine')}{memory}",
        )
        return {"FINISHED"}


class DIFFREC_OT_generate_keys(bpy.types.Operator):
    """Create this computer's key pair for a remote backend"""

    bl_idname = "diffrec.generate_keys"
    bl_label = "Generate Key Pair"

    @messages.reported
    def execute(self, context):
        public, _ = connection.client_keypair(preferences.user_directory())
        self.report({"INFO"}, f"public key {public}")
        return {"FINISHED"}


class DIFFREC_OT_copy_public_key(bpy.types.Operator):
    """Copy this computer's public key to the clipboard"""

    bl_idname = "diffrec.copy_public_key"
    bl_label = "Copy Public Key"

    @messages.reported
    def execute(self, context):
        public, _ = connection.client_keypair(preferences.user_directory())
        context.window_manager.clipboard = public
        return {"FINISHED"}


CLASSES = (DIFFREC_OT_test_connection, DIFFREC_OT_generate_keys, DIFFREC_OT_copy_public_key)

register, unregister = bpy.utils.register_classes_factory(CLASSES)
