"""Start textures (``start_kd``, ``start_ks``, ``start_normal``) and a start's clear coat
(``start_coat``) are checked at submit like every other input: a wrong layout, a NaN, or
textures without the UVs they cover are refused with ``invalid_input`` and a sentence naming
the array."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from helpers.servers import error_of, optimize_inputs, server_in_process

from diffrec.io import read_gltf
from diffrec.mesh.primitives import plane
from diffrec.protocol import Client
from diffrec.server.optimize_runner import OptimizeRunner
from diffrec.server.runner import JobContext

SPEC = {"task": "optimize", "settings": {"mode": "materials", "light": "learn",
                                         "train_res": 16}}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with server_in_process(tmp_path_factory.mktemp("start") / "data") as server, \
            Client(server.endpoint, timeout=5.0, retry_for=30.0) as client:
        yield client


def textured_job() -> dict[str, np.ndarray]:
    """Valid materials inputs: a plane of 8 triangles with UVs, and its three start
    textures."""
    mesh = plane(2)
    return {**optimize_inputs(), "vertices": mesh.positions.numpy(),
            "faces": mesh.triangles.numpy().astype(np.int32), "uvs": mesh.uvs.numpy(),
            "uv_faces": mesh.uv_triangles.numpy().astype(np.int32),
            "start_kd": np.full((8, 8, 3), 0.4, np.float32),
            "start_ks": np.tile(np.float32([0.0, 0.6, 0.0]), (8, 8, 1)),
            "start_normal": np.tile(np.float32([0.5, 0.5, 1.0]), (8, 8, 1))}


def nan_texel(array: np.ndarray) -> np.ndarray:
    array = array.copy()
    array[3, 4, 1] = np.nan
    return array


@pytest.mark.parametrize(("name", "change", "refusal"), [
    ("start_kd", lambda a: a[..., :2], "array 'start_kd': axis 2 must be 3"),
    ("start_ks", lambda a: a[0], "array 'start_ks': must have 3 dimensions"),
    ("start_normal", nan_texel, "array 'start_normal' contains NaN or infinite values"),
    ("start_kd", lambda a: a.astype(np.int32), "array 'start_kd': dtype int32 must be one of"),
])
def test_a_start_texture_of_the_wrong_layout_or_values_is_refused(client, name, change,
                                                                    refusal):
    inputs = textured_job()
    inputs[name] = change(inputs[name])
    error = error_of(lambda: client.submit(f"bad-{name}", SPEC, inputs))
    assert error.code == "invalid_input" and refusal in error.message, error.message


@pytest.mark.parametrize(("coat", "refusal"), [
    (np.float32([1.2, 0.1]), "array 'start_coat': values must lie in [0, 1], found 0.1 .. 1.2"),
    (np.float32([[1.0, 0.1]]), "array 'start_coat': must have 1 dimensions"),
    (np.float32([1.0, 0.1, 0.0]), "array 'start_coat': axis 0 must be 2"),
    (np.float32([np.nan, 0.1]), "array 'start_coat' contains NaN or infinite values"),
])
def test_a_start_coat_of_the_wrong_layout_or_values_is_refused(client, coat, refusal):
    inputs = {**textured_job(), "start_coat": coat}
    error = error_of(lambda: client.submit("bad-coat", SPEC, inputs))
    assert error.code == "invalid_input" and refusal in error.message, error.message


@pytest.mark.parametrize(("ior", "refusal"), [
    (np.float32([0.5]), "array 'start_ior': an index of refraction is at least 1, found 0.5"),
    (np.float32([1.5, 2.0]), "array 'start_ior': axis 0 must be 1"),
    (np.float32([np.inf]), "array 'start_ior' contains NaN or infinite values"),
])
def test_a_start_ior_of_the_wrong_layout_or_values_is_refused(client, ior, refusal):
    inputs = {**textured_job(), "start_ior": ior}
    error = error_of(lambda: client.submit("bad-ior", SPEC, inputs))
    assert error.code == "invalid_input" and refusal in error.message, error.message


@pytest.mark.parametrize(("extra", "refusal"), [
    ({"start_coat": np.float32([1.0, 0.1])}, "start_coat: the start has a clear coat, which "
     "the path-traced pass does not shade: set renderer to rasterized"),
    ({"start_ior": np.float32([1.45])}, "start_ior: the start has IOR 1.45, which the "
     "path-traced pass does not shade (it shades 1.5)"),
])
def test_a_coat_or_an_ior_the_path_traced_pass_cannot_shade_is_refused_at_submit(
        client, extra, refusal):
    """Before, these failed at run time, after the decimation and the unwrap."""
    spec = {**SPEC, "settings": {**SPEC["settings"], "renderer": "path-traced"}}
    error = error_of(lambda: client.submit("traced-coat", spec, {**textured_job(), **extra}))
    assert error.code == "invalid_input" and refusal in error.message, error.message
    client.submit("traced-glass", spec, {**textured_job(), "start_ior": np.float32([1.5])})
    client.cancel("traced-glass")


def test_a_start_coat_in_reconstruct_is_refused(client):
    inputs = {**textured_job(), "start_coat": np.float32([1.0, 0.1])}
    spec = {**SPEC, "settings": {**SPEC["settings"], "mode": "reconstruct"}}
    error = error_of(lambda: client.submit("coat-reconstruct", spec, inputs))
    assert error.code == "invalid_input", error.message
    assert "start_kd, start_ks, start_normal, start_coat: start textures cover a base mesh's " \
        "UVs, and mode 'reconstruct' finds its own surface" in error.message, error.message


@pytest.mark.parametrize(("spec_settings", "drop", "refusal"), [
    ({}, ("uvs", "uv_faces"), "start_kd, start_ks, start_normal: start textures cover the "
     "base mesh's UVs: send the mesh (vertices, faces) with its uvs and uv_faces"),
    ({"mode": "reconstruct"}, (), "mode 'reconstruct' finds its own surface"),
    ({"target_triangles": 4}, (), "the base mesh has 8 triangles, over target_triangles 4; "
     "decimating it would lose the UVs the start textures cover"),
])
def test_start_textures_without_the_uvs_they_cover_are_refused(client, spec_settings, drop,
                                                               refusal):
    inputs = textured_job()
    for name in drop:
        del inputs[name]
    spec = {**SPEC, "settings": {**SPEC["settings"], **spec_settings}}
    error = error_of(lambda: client.submit("no-uvs", spec, inputs))
    assert error.code == "invalid_input" and refusal in error.message, error.message


def test_the_runner_starts_the_job_from_its_start_textures(tmp_path):
    """Through the optimize runner as a server job runs it: the start textures become the
    base material, the job starts from them (init_textures "base_mesh", the normal map
    trained), and after one step too small to move them the result's base colour is the one
    sent."""
    rows, columns = np.mgrid[:8, :8] / 7.0
    inputs = textured_job()
    inputs["start_kd"] = np.stack([0.2 + 0.6 * columns, 0.2 + 0.6 * rows,
                                   np.full((8, 8), 0.5)], -1).astype(np.float32)
    runner = OptimizeRunner("cpu")
    settings = runner.parse({"task": "optimize", "settings": {
        **SPEC["settings"], "preset": "preview", "iterations": 1, "texture_res": 8,
        "learning_rate": [0.03, 1e-12], "validation": False, "checkpoint_every": 0, "light_res": 32,
        "test_views": 1}})
    runner.check_inputs(settings, inputs)
    runner.run(JobContext("textured", settings, inputs, tmp_path / "state",
                          tmp_path / "results", "cpu", lambda *event: None, threading.Event()))
    metrics = json.loads((tmp_path / "results" / "metrics.json").read_text())
    assert (metrics["settings"]["init_textures"], metrics["settings"]["normal_map"]) == \
        ("base_mesh", "on")
    kd = read_gltf(tmp_path / "results" / "mesh.glb").materials[0].kd
    np.testing.assert_allclose(kd[..., :3].numpy(), inputs["start_kd"], atol=0.01)
