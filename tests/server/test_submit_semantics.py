"""Issue 26.5 and 26.6: inputs that make no sense are refused at submit with ``invalid_input``
naming the array and the fault (they used to be accepted and fail when run, or reach
``internal``), and the disk's failures get their own sentences."""

from __future__ import annotations

import errno
import shutil

import numpy as np
import pytest
from helpers.servers import error_of, optimize_inputs, server_in_process

from diffrec.pipeline.job_arrays import from_job_arrays
from diffrec.protocol import Client
from diffrec.protocol.limits import MAX_JSON_DEPTH, MIB
from diffrec.server import disk

SPEC = {"task": "optimize", "settings": {"mode": "reconstruct", "light": "learn",
                                         "train_res": 16}}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with server_in_process(tmp_path_factory.mktemp("semantics") / "data") as server, \
            Client(server.endpoint, timeout=5.0, retry_for=30.0) as client:
        yield client


def with_input(name: str, change) -> dict[str, np.ndarray]:
    inputs = optimize_inputs()
    change(inputs[name])
    return inputs


@pytest.mark.parametrize(("name", "change", "refusal"), [
    ("intrinsics", lambda a: a.__setitem__((1, 0), 0.0), "camera 1 has fx 0"),
    ("intrinsics", lambda a: a.__setitem__((2, 4), 20.0), "0 < near < far"),
    ("cameras", lambda a: a.__setitem__((0, slice(0, 3), slice(0, 3)), 0.0),
     "camera 0 is not a camera-to-world matrix"),
    ("cameras", lambda a: a.__setitem__((3, 3, 0), 1.0), "its last row must be 0 0 0 1"),
    ("images", lambda a: a.__setitem__((0, 0, 0, 3), 2.0), "alpha must lie in [0, 1]"),
])
def test_inputs_that_make_no_sense_are_refused_at_submit(client, name, change, refusal):
    error = error_of(lambda: client.submit(f"bad-{name}", SPEC, with_input(name, change)))
    assert error.code == "invalid_input" and f"array {name!r}" in error.message
    assert refusal in error.message


def test_uint16_images_are_read_as_the_protocol_says():
    """docs/protocol.md section 8 allows uint16 images; the runner used to refuse them."""
    inputs = optimize_inputs()
    inputs["images"] = np.full((4, 16, 16, 4), 65535, np.uint16)
    views, _, _ = from_job_arrays(inputs)
    assert views.images.dtype.is_floating_point
    np.testing.assert_allclose(views.images.numpy(), 1.0)


def test_unknown_spec_keys_are_refused(client):
    error = error_of(lambda: client.submit("typo", {**SPEC, "setings": {}}, optimize_inputs()))
    assert error.code == "invalid_input" and "unknown spec key(s) 'setings'" in error.message


def test_a_deeply_nested_spec_is_a_bad_message_not_internal(client):
    spec: dict = {}
    for _ in range(600):
        spec = {"a": spec}
    error = error_of(lambda: client.call("submit", {"job": "deep", "spec": spec}))
    assert error.code == "bad_message" and f"more than {MAX_JSON_DEPTH} deep" in error.message


def test_a_write_error_without_errno_on_a_full_disk_is_disk_full(tmp_path, monkeypatch):
    """numpy's writers raise OSError without errno when the disk fills."""
    monkeypatch.setattr(disk, "free_bytes", lambda path: MIB)
    error = disk.storage_error(OSError("3 requested and 0 written"), tmp_path)
    assert error is not None and error.code == "disk_full"
    monkeypatch.setattr(disk, "free_bytes", lambda path: 10 * disk.DISK_RESERVE_BYTES)
    assert disk.storage_error(OSError("3 requested and 0 written"), tmp_path) is None
    assert disk.storage_error(OSError(errno.ENOSPC, "full"), tmp_path).code == "disk_full"


def test_a_disk_smaller_than_the_reserve_says_so(tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda path: usage._replace(total=60 * MIB, free=50 * MIB))
    message = disk.disk_full_message(tmp_path, 10 * MIB)
    assert message.startswith(f"the server's disk is too small: it holds {60 * MIB} bytes")
    assert "larger disk" in message
