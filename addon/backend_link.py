"""Reaching the backend from Blender: ``connector`` (a protocol Client factory made from the
preferences) and the connection operators (Test Connection, the client key pair)."""

from __future__ import annotations

import bpy

from . import connection, preferences


def connector(context):
    """A function making a protocol Client from the preferences. Everything it needs is read
    here, on the main thread; the function itself never touches bpy (worker threads call it)."""
    from .wire import protocol

    target = connection.endpoint(preferences.setting("endpoint", context) or "")
    connection.check_online_access(target, bpy.app.online_access)
    keypair = None
    if target.server_key:
        keypair = connection.client_keypair(preferences.user_directory())
    timeout = preferences.setting("timeout", context)
    auto_start = preferences.setting("auto_start", context) and target.is_loopback
    python = preferences.setting("python", context)
    data_dir = preferences.user_directory() / "backend"

    def connect():
        client_class = protocol().Client
        if auto_start:
            try:
                with client_class(target.address, timeout=1.0, retry_for=1.0) as probe:
                    probe.ping()
            except protocol().ServerUnavailable:
                connection.start_local_backend(python, target.address, data_dir)
        return client_class(
            target.address,
            server_key=target.server_key,
            client_keypair=keypair,
            timeout=timeout,
            retry_for=max(30.0, 3 * timeout),
        )

    return connect


class DIFFREC_OT_test_connection(bpy.types.Operator):
    """Ask the backend for its protocol version, device and free memory"""

    bl_idname = "diffrec.test_connection"
    bl_label = "Test Connection"

    def execute(self, context):
        from .wire import protocol

        try:
            with connector(context)() as client:
                client.retry_for = client.timeout
                reply = client.ping()
        except protocol().ServerUnavailable as exc:
            self.report(
                {"ERROR"},
                f"{exc}: the backend is not running, the port is refused, or the keys do not "
                "match (a CURVE server answers nothing to an unknown key)",
            )
            return {"CANCELLED"}
        except (ValueError, PermissionError, OSError) as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        if reply.get("protocol") != protocol().PROTOCOL_VERSION:
            self.report(
                {"ERROR"},
                f"protocol version mismatch: server {reply.get('protocol')}, add-on "
                f"{protocol().PROTOCOL_VERSION}; update the older side",
            )
            return {"CANCELLED"}
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

    def execute(self, context):
        public, _ = connection.client_keypair(preferences.user_directory())
        self.report({"INFO"}, f"public key {public}")
        return {"FINISHED"}


class DIFFREC_OT_copy_public_key(bpy.types.Operator):
    """Copy this computer's public key to the clipboard"""

    bl_idname = "diffrec.copy_public_key"
    bl_label = "Copy Public Key"

    def execute(self, context):
        public, _ = connection.client_keypair(preferences.user_directory())
        context.window_manager.clipboard = public
        return {"FINISHED"}


CLASSES = (DIFFREC_OT_test_connection, DIFFREC_OT_generate_keys, DIFFREC_OT_copy_public_key)

register, unregister = bpy.utils.register_classes_factory(CLASSES)
