"""KTX2 export: the container read by an independent reader (ktx-parse), every level of every
texture read back through basisu's own decoder and three.js's transcoder (the two agree bit
for bit) equal to what was fitted within UASTC's error (stated below), and the GLB variant
that names the files."""

import base64
import json
from pathlib import Path

import numpy as np
import pygltflib
import pytest
import torch
from helpers.node_tools import require_basisu, run_node

from diffrec.errors import UserError
from diffrec.io import Material, read_gltf, write_glb
from diffrec.io.basisu import ENV_VARIABLE, decode_levels
from diffrec.io.gltf_write import BASISU, file_texture
from diffrec.io.images import decode_image, encode_integer_image
from diffrec.io.ktx2 import (
    SUPERCOMPRESSION_NONE,
    SUPERCOMPRESSION_ZSTD,
    Ktx2,
    Level,
    read_ktx2,
    write_ktx2,
)
from diffrec.io.ktx2_textures import (
    KTX2_NAMES,
    VARIANT_NAME,
    read_ktx2_textures,
    write_ktx2_variant,
)
from diffrec.io.mips import box_level, mip_chain

# UASTC's error on the 32x32 smooth textures below, per level 0..4, against the 8-bit PNG
# of the same level (what the KTX2 would hold were it lossless): at least MIN_PSNR dB (as
# measured with basisu 1.15 at UASTC level 1, ``basisu.UASTC_LEVEL``, less 1.5 dB) and at most
# MAX_ERROR 8-bit steps on any texel and channel (as measured plus 2). Each 4x4 block holds
# more of the texture's variation as levels shrink, so small levels lose more; a level of one
# block or less (2x2, 1x1) is exact here.
MIN_PSNR = {"kd": (40.3, 35.6, 30.3, 25.0, 34.8), "ks": (43.9, 36.9, 31.5, 24.2, 40.8),
            "normal": (50.2, 47.1, 38.2, 34.3, 49.0)}
MAX_ERROR = {"kd": (11, 19, 24, 32, 10), "ks": (9, 15, 19, 32, 5), "normal": (4, 5, 9, 10, 3)}


def test_the_container_reads_back_here_and_in_ktx_parse(tmp_path):
    rng = np.random.default_rng(3)
    levels = [Level(rng.bytes(size), uncompressed) for size, uncompressed
              in ((70, 128), (33, 32), (17, 16), (9, 16))]
    for scheme in (SUPERCOMPRESSION_ZSTD, SUPERCOMPRESSION_NONE):
        texture = Ktx2(12, 8, levels, scheme, alpha=scheme == SUPERCOMPRESSION_NONE,
                       srgb=scheme == SUPERCOMPRESSION_ZSTD)
        path = tmp_path / f"scheme{scheme}.ktx2"
        path.write_bytes(write_ktx2(texture))
        assert read_ktx2(path.read_bytes()) == texture
        info = run_node("ktx2_info.mjs", path)[str(path)]
        assert (info["vkFormat"], info["typeSize"], info["pixelWidth"], info["pixelHeight"],
                info["pixelDepth"], info["layerCount"], info["faceCount"],
                info["supercompressionScheme"]) == (0, 1, 12, 8, 0, 0, 1, scheme)
        assert info["levels"] == [{"byteLength": len(level.data), "byteSum": sum(level.data),
                                   "uncompressedByteLength": level.uncompressed_length}
                                  for level in levels]
        dfd = info["dfd"]
        # KHR_texture_basisu: UASTC; colour data BT.709 + sRGB, other data unspecified + linear
        assert (dfd["colorModel"], dfd["texelBlockDimension"], dfd["bitLengths"]) == (
            166, [3, 3, 0, 0], [127])
        srgb = scheme == SUPERCOMPRESSION_ZSTD
        assert (dfd["colorPrimaries"], dfd["transferFunction"]) == ((1, 2) if srgb else (0, 1))
        assert dfd["channels"] == ([0] if srgb else [3])  # UASTC RGB, UASTC RGBA
        assert dfd["bytesPlane"][0] == (0 if srgb else 16)  # unsized when supercompressed
        assert info["keyValue"] == {"KTXwriter": "diffrec"}


def smooth_material() -> tuple[Material, Material]:
    """32x32 textures that vary smoothly (as baked textures mostly do), with fitted level 1s
    for kd and normal that differ from the box averages, so the test sees which was written."""
    y, x = torch.meshgrid(torch.linspace(0, 1, 32), torch.linspace(0, 1, 32), indexing="ij")
    wave = 0.5 + 0.4 * torch.sin(6 * x) * torch.cos(4 * y)
    kd = torch.stack([0.2 + 0.6 * x, wave, 0.7 - 0.5 * y, 0.5 + 0.5 * x * y], -1)
    ks = torch.stack([0.3 * y, 0.2 + 0.6 * wave, 0.8 * x], -1)
    normal = torch.stack([0.4 * torch.sin(5 * x), 0.3 * torch.cos(3 * y), torch.ones_like(x)], -1)
    normal = normal / normal.norm(dim=-1, keepdim=True)
    plain = Material(kd=kd, ks=ks, normal=normal)
    fitted_kd = box_level("kd", kd).flip(-1)  # alpha, blue, green, red
    fitted_normal = box_level("normal", normal) * torch.tensor([-1.0, -1.0, 1.0])
    fitted = Material(kd=kd, ks=ks, normal=normal,
                      mips={"kd": [fitted_kd], "normal": [fitted_normal]})
    return fitted, plain


def stored(name: str, level: torch.Tensor) -> np.ndarray:
    """A texture level as its 8-bit PNG stores it (``gltf_write``'s layout), uint8."""
    image, data = file_texture(name, level)
    return np.round(decode_image(encode_integer_image(image, data=data), data=True) * 255
                    ).astype(np.uint8)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def test_every_level_reads_back_as_fitted_within_uastc_error(tmp_path, textured_mesh):
    require_basisu()
    material, plain = smooth_material()
    written, notes = write_ktx2_variant(tmp_path, textured_mesh, material)
    assert notes == []
    assert written == [VARIANT_NAME, *KTX2_NAMES.values()]
    engine = run_node("transcode_ktx2.mjs", *(tmp_path / file for file in KTX2_NAMES.values()))
    for name, file in KTX2_NAMES.items():
        decoded = decode_levels(require_basisu(), tmp_path / file)
        # three.js's transcoder (what its KTX2Loader runs) reads the same levels, bit for bit
        seen = engine[str(tmp_path / file)]
        assert (seen["uastc"], seen["srgb"], seen["alpha"]) == (True, name == "kd", name == "kd")
        for level, got in zip(seen["levels"], decoded, strict=True):
            pixels = np.frombuffer(base64.b64decode(level["rgba"]), np.uint8)
            pixels = pixels.reshape(level["height"], level["width"], 4)
            assert np.array_equal(pixels[..., :got.shape[-1]], got), name
        chain = mip_chain(material, name)
        assert [level.shape[:2] for level in decoded] == [
            (32 >> k, 32 >> k) for k in range(6)] == [tuple(level.shape[:2]) for level in chain]
        for index, (level, got) in enumerate(zip(chain, decoded, strict=True)):
            want = stored(name, level)
            got = got[..., :want.shape[-1]]
            where = f"{name} level {index}: {psnr(got, want):.1f} dB"
            floor, largest = ((MIN_PSNR[name][index], MAX_ERROR[name][index]) if index < 5
                              else (np.inf, 0))
            assert psnr(got, want) >= floor, where
            assert np.abs(got.astype(int) - want).max() <= largest, where
            if index == 1 and name in material.mips:  # the fitted level, not the box average
                assert psnr(got, stored(name, mip_chain(plain, name)[1])) < 20, where


def test_the_files_read_back_in_the_materials_conventions(tmp_path, textured_mesh,
                                                          monkeypatch):
    """``read_ktx2_textures`` undoes the files' layout: the levels it returns, laid out again
    as a file stores them, are the 8-bit levels basisu decodes; a relative folder works."""
    require_basisu()
    material, _ = smooth_material()
    write_ktx2_variant(tmp_path, textured_mesh, material)
    monkeypatch.chdir(tmp_path.parent)
    channels = read_ktx2_textures(Path(tmp_path.name))
    assert set(channels) == set(KTX2_NAMES)
    for name, levels in channels.items():
        decoded = decode_levels(require_basisu(), tmp_path / KTX2_NAMES[name])
        assert len(levels) == len(decoded) == 6
        for level, got in zip(levels, decoded, strict=True):
            if name == "normal":  # renormalised after decoding: the bytes' direction
                direction = torch.nn.functional.normalize(
                    torch.from_numpy(got[..., :3] / 127.5 - 1.0).float(), dim=-1)
                assert float((direction * level).sum(-1).min()) > 0.99999
                continue
            again = stored(name, level)  # kd's sRGB decode rounds back but for a step of 1
            assert np.abs(again.astype(int) - got[..., :again.shape[-1]]).max() <= 1, name
    assert channels["kd"][0].shape == (32, 32, 4)
    assert torch.allclose(channels["normal"][2].norm(dim=-1), torch.ones(8, 8), atol=1e-5)


def test_the_variant_names_the_ktx2_files_and_keeps_the_pngs(tmp_path, textured_mesh):
    material, _ = smooth_material()
    names = {"kd": "texture_kd.ktx2", "normal": "texture_n.ktx2"}
    write_glb(tmp_path / "mesh.glb", textured_mesh, material)
    write_glb(tmp_path / "variant.glb", textured_mesh, material, ktx2=names)
    gltf = pygltflib.GLTF2().load(str(tmp_path / "variant.glb"))
    assert gltf.extensionsUsed == [BASISU] and not gltf.extensionsRequired
    sources = {}
    for texture in gltf.textures:
        assert gltf.images[texture.source].mimeType == "image/png"  # the fallback
        if texture.extensions:
            sources[texture.source] = gltf.images[texture.extensions[BASISU]["source"]].uri
    pbr = gltf.materials[0].pbrMetallicRoughness
    kd_png = gltf.textures[pbr.baseColorTexture.index].source
    normal_png = gltf.textures[gltf.materials[0].normalTexture.index].source
    assert sources == {kd_png: "texture_kd.ktx2", normal_png: "texture_n.ktx2"}
    # A reader that ignores the extension gets exactly mesh.glb's material.
    plain, variant = (read_gltf(tmp_path / name).materials[0]
                      for name in ("mesh.glb", "variant.glb"))
    for channel in ("kd", "ks", "normal"):
        torch.testing.assert_close(getattr(variant, channel), getattr(plain, channel))
    document = json.loads(gltf.gltf_to_json())
    assert all("mimeType" not in image for image in document["images"] if "uri" in image)


@pytest.mark.parametrize("side", [6, 10])
def test_sides_not_a_multiple_of_4_stay_png(tmp_path, textured_mesh, side):
    require_basisu()
    material = Material(kd=torch.rand(side, 8, 3), ks=torch.rand(8, 8, 3))
    written, notes = write_ktx2_variant(tmp_path, textured_mesh, material)
    assert written == [VARIANT_NAME, "texture_ks.ktx2"]
    assert notes == [f"the kd texture is {side}x8, not a multiple of 4 on both sides as KTX2 "
                     f"with Basis Universal needs: it stays PNG only"]
    # with no texture that can go to KTX2 the variant would be mesh.glb again: none is written
    lone = tmp_path / "lone"
    lone.mkdir()
    written, notes = write_ktx2_variant(lone, textured_mesh, Material(kd=torch.rand(side, 8, 3)))
    assert written == [] and list(lone.iterdir()) == []
    assert notes[-1] == "no mesh_ktx2.glb: no texture of this asset can go to KTX2"


def test_files_that_are_not_uastc_ktx2_are_refused_with_a_sentence():
    whole = write_ktx2(Ktx2(4, 4, [Level(b"x" * 16, 16)], SUPERCOMPRESSION_NONE, False, False))
    for data, message in ((b"not a texture", "is not a KTX2 file"),
                          (whole[:-8], "is cut short in level 0")):
        with pytest.raises(UserError, match=f"texture.ktx2 {message}"):
            read_ktx2(data, "texture.ktx2")


def test_a_failing_basisu_leaves_the_variant_out_and_says_why(tmp_path, textured_mesh,
                                                              monkeypatch):
    broken = tmp_path / "basisu"
    broken.write_text("#!/bin/sh\necho 'out of cheese'\nexit 3\n")
    broken.chmod(0o755)
    monkeypatch.setenv(ENV_VARIABLE, str(broken))
    out = tmp_path / "out"
    out.mkdir()
    written, notes = write_ktx2_variant(out, textured_mesh, Material(kd=torch.rand(4, 4, 3)))
    assert written == [] and not (out / VARIANT_NAME).exists()
    assert notes == [f"KTX2 export skipped (no {VARIANT_NAME}): basisu ({broken}) failed with "
                     f"exit code 3: out of cheese"]
    broken.write_text("#!/bin/sh\nexit 1\n")  # failing without a word
    _, notes = write_ktx2_variant(out, textured_mesh, Material(kd=torch.rand(4, 4, 3)))
    assert notes[-1].endswith("failed with exit code 1: it printed nothing"), notes


def test_basisu_failing_on_a_later_texture_leaves_no_ktx2_file(tmp_path, textured_mesh,
                                                                monkeypatch):
    """basisu encodes the base colour, then fails on the ORM texture: no .ktx2 file is left."""
    basisu = require_basisu()
    once = tmp_path / "basisu"
    once.write_text(f"#!/bin/sh\nif [ -e {tmp_path}/ran ]; then echo 'out of cheese'; exit 3; fi\n"
                    f"touch {tmp_path}/ran\nexec {basisu} \"$@\"\n")
    once.chmod(0o755)
    monkeypatch.setenv(ENV_VARIABLE, str(once))
    out = tmp_path / "out"
    out.mkdir()
    material = Material(kd=torch.rand(8, 8, 3), ks=torch.rand(8, 8, 3))
    written, notes = write_ktx2_variant(out, textured_mesh, material)
    assert (tmp_path / "ran").exists() and "exit code 3" in notes[-1], notes
    assert written == [] and sorted(path.name for path in out.iterdir()) == []
def test_grey_levels_read_back_in_colour(tmp_path, textured_mesh):
    """basisu writes a grey level's PNG with one channel: it reads back as RGB like the rest."""
    require_basisu()
    grey = Material(kd=torch.full((16, 16, 3), 0.5), ks=torch.full((16, 16, 3), 0.5))
    write_ktx2_variant(tmp_path, textured_mesh, grey)
    channels = read_ktx2_textures(tmp_path)
    assert [level.shape[-1] for level in channels["kd"]] == [3] * 5
    assert all(torch.allclose(level, torch.tensor(0.5), atol=0.01) for level in channels["kd"])
    assert all(level.shape[-1] == 3 for level in channels["ks"])
