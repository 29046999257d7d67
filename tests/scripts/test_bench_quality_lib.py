"""The quality benchmark's measurements without Blender: geometry against a true mesh
(closest points, Chamfer-L1, normal consistency, topology), the summary against issue 12's
targets, and relighting's (issue 25) lights, base-colour error and relit summary."""


import numpy as np
import pytest
import torch

trimesh = pytest.importorskip("trimesh")

from diffrec_bench.quality import albedo, geometry, light_level, lights, table  # noqa: E402
from diffrec_bench.quality.recipes import RECIPES  # noqa: E402


def test_closest_point_on_triangles_is_the_nearest_of_the_whole_triangle():
    generator = torch.Generator().manual_seed(0)
    a, b, c = torch.randn(3, 300, 3, generator=generator)
    p = 2 * torch.randn(300, 3, generator=generator)
    closest = geometry.closest_on_triangles(p, a, b, c)
    weights = torch.rand(4000, 2, generator=generator)
    weights = torch.where(weights.sum(1, keepdim=True) > 1, 1 - weights, weights)
    dense = a[:, None] + weights[:, :1] * (b - a)[:, None] + weights[:, 1:] * (c - a)[:, None]
    sampled = (dense - p[:, None]).norm(dim=-1).min(dim=1).values  # an upper bound
    found = (closest - p).norm(dim=-1)
    assert (found <= sampled + 1e-5).all()
    assert (sampled - found).max() < 0.05  # and close to it: the point lies on the triangle
    on_plane = torch.linalg.det(torch.stack([b - a, c - a, closest - a], dim=1)).abs()
    assert on_plane.max() < 1e-4


def _sphere(radius=1.0, offset=(0, 0, 0)):
    mesh = trimesh.creation.icosphere(subdivisions=4, radius=radius)
    return geometry.as_trimesh(mesh.vertices + np.asarray(offset), mesh.faces)


def test_chamfer_is_a_fraction_of_the_diagonal_and_zero_for_the_same_surface():
    truth = _sphere()
    same = geometry.compare(truth, truth, samples=4000)
    assert same["chamfer_l1"] < 1e-4 and same["normal_consistency"] > 0.999
    bigger = geometry.compare(_sphere(1.1), truth, samples=4000)
    diagonal = 2 * np.sqrt(3)  # of the unit sphere's bounding box
    assert bigger["chamfer_l1"] == pytest.approx(0.1 / diagonal, rel=0.05)
    assert bigger["normal_consistency"] > 0.99  # same directions, only further out


def test_a_floater_costs_accuracy_and_a_missing_part_completeness():
    truth = _sphere()
    floater = trimesh.util.concatenate([truth, _sphere(0.2, (3, 0, 0))])
    with_floater = geometry.compare(floater, truth, samples=4000)
    assert with_floater["accuracy"] > 10 * with_floater["completeness"]
    assert with_floater["result_topology"] == {"components": 2, "genus": 0}
    missing = geometry.compare(truth, floater, samples=4000)
    assert missing["completeness"] > 10 * missing["accuracy"]


def test_topology_tells_a_ring_from_a_ball_and_an_open_surface():
    torus = trimesh.creation.torus(1.0, 0.3)
    assert geometry.topology(geometry.as_trimesh(torus.vertices, torus.faces)) == {
        "components": 1, "genus": 1}
    assert geometry.topology(_sphere()) == {"components": 1, "genus": 0}
    half = _sphere()
    half = geometry.as_trimesh(half.vertices, half.faces[half.triangles_center[:, 2] > 0])
    assert geometry.topology(half) == {"components": 1, "genus": None}


def _record(scene, mode, psnr, iou=0.99, chamfer=0.001, seconds=60.0, genus=1):
    return {"scene": scene, "mode": mode,
            "cycles": {"psnr_mean": psnr, "psnr_object_mean": psnr - 8, "ssim_mean": 0.95,
                       "iou_mean": iou},
            "geometry": {"chamfer_l1": chamfer, "normal_consistency": 0.98, "triangles": 1000,
                         "result_topology": {"components": 1, "genus": genus},
                         "true_topology": {"components": 1, "genus": 1}},
            "optimize": {"wall_s": seconds, "cpu_s": 2 * seconds, "peak_mib": 900.0}}


def test_summary_checks_each_target_and_names_what_differs():
    records = [_record("ring", "reconstruct", 27.0, genus=0),
               _record("mug", "reconstruct", 24.0, iou=0.96, chamfer=0.02, seconds=400.0),
               {"scene": "box", "mode": "reconstruct", "error": "killed"}]
    stats = table.summary(records)["reconstruct"]
    assert stats["psnr_mean"] == pytest.approx(25.5) and stats["failed"] == ["box"]
    assert stats["topology_differs"] == ["ring"]  # the hole was closed
    met = {key: value["met"] for key, value in stats["targets"].items()}
    assert met == {"psnr_mean": False, "psnr_min": True, "iou_min": False,
                   "chamfer_max": False, "seconds_max": False}
    lines = table.markdown(records).splitlines()
    assert len(lines) == 5 and "failed" in lines[-1] and "| 1 / 0 (1 / 1) |" in lines[2]
    assert any("iou_min: 0.960 against 0.97: MISSED" in line
               for line in table.summary_lines({"reconstruct": stats}))


def _albedo_renders(seed=0, size=24):
    """A [2, size, size, 4] base-colour render: random colours inside a disc, alpha 1 there."""
    generator = np.random.default_rng(seed)
    image = np.zeros((2, size, size, 4), np.float32)
    y, x = np.mgrid[:size, :size] - (size - 1) / 2
    inside = np.hypot(x, y) < size / 3
    image[:, inside, :3] = generator.uniform(0.02, 0.9, (2, int(inside.sum()), 3))
    image[:, inside, 3] = 1.0
    return image


def test_albedo_error_of_the_truth_is_zero_and_a_known_scale_is_recovered():
    truth = _albedo_renders()
    same = albedo.albedo_error(truth, truth)
    assert same["rmse"] < 1e-7 and same["rmse_raw"] < 1e-7
    assert same["scale"] == pytest.approx([1, 1, 1])
    dimmer = truth.copy()
    dimmer[..., :3] /= np.array([2.0, 0.5, 1.25], np.float32)  # darker red, brighter green
    found = albedo.albedo_error(dimmer, truth)
    assert found["scale"] == pytest.approx([2.0, 0.5, 1.25], rel=1e-5)
    assert found["rmse"] < 1e-6 < 0.05 < found["rmse_raw"]


def test_albedo_error_counts_object_pixels_of_both_and_sees_a_baked_shadow():
    truth = _albedo_renders()
    result = truth.copy()
    outside = truth[..., 3] == 0
    result[0][outside[0]] = (3.0, 3.0, 3.0, 1.0)  # covered in the result only: ignored
    result[1][outside[1]] = (5.0, 5.0, 5.0, 0.0)  # colour under zero alpha: ignored
    assert albedo.albedo_error(result, truth)["rmse"] < 1e-7
    shadowed = truth.copy()
    shadowed[..., 12:, :, :3] *= 0.3  # half the object darkened: no one scale undoes it
    error = albedo.albedo_error(shadowed, truth)
    assert error["relative"] > 0.2 and all(s > 1.0 for s in error["scale"])
    with pytest.raises(ValueError, match="no pixel in common"):
        albedo.albedo_error(truth, np.zeros_like(truth))


def test_albedo_error_at_shading_scale_keeps_a_baked_shadow_and_drops_fine_detail():
    truth = _albedo_renders(size=128)  # the suite's size: a blur of 2 pixels
    truth[..., :3] = np.where(truth[..., 3:] > 0, 0.5, 0.0)  # a flat grey disc
    speckled = truth.copy()  # texel noise, as a texture too coarse for fine detail
    speckled[..., :3] *= np.random.default_rng(1).choice([0.7, 1.3], truth.shape[:3])[..., None]
    shadowed = truth.copy()  # a soft shadow over a third of the disc
    shadowed[..., 80:, :, :3] *= 0.5
    noisy, dark = albedo.albedo_error(speckled, truth), albedo.albedo_error(shadowed, truth)
    assert noisy["relative"] > 0.25 and noisy["relative_shading"] < 0.4 * noisy["relative"]
    assert dark["relative_shading"] > 0.6 * dark["relative"] > 0.1
    same = albedo.albedo_error(truth, truth)
    assert same["relative_shading"] < 1e-6, "the blur alone makes no error"


def test_the_masked_blur_averages_inside_the_mask_only():
    image = np.zeros((1, 9, 9, 1))
    image[0, :, 5:] = 1.0  # bright where masked out: must not leak in
    mask = np.zeros((1, 9, 9), bool)
    mask[0, :, :5] = True
    image[0, :, :5, 0] = 0.25
    blurred = albedo.masked_blur(image, mask, sigma=2.0)
    assert np.allclose(blurred[0][mask[0]], 0.25)


def test_each_scene_is_relit_under_two_other_suite_hdris_and_the_sun():
    relit_by = {}
    for scene, recipe in RECIPES.items():
        chosen = lights.relight_lights(scene)
        hdris = [light["hdri"] for light in chosen if light["kind"] == "hdri"]
        assert len(set(hdris)) == 2 and recipe["hdri"] not in hdris
        assert [light["kind"] for light in chosen] == ["hdri", "hdri", "sun"]
        assert len({light["name"] for light in chosen}) == 3
        for hdri in hdris:
            relit_by.setdefault(hdri, []).append(scene)
    assert sorted(relit_by) == sorted(lights.suite_hdris())
    counts = [len(scenes) for scenes in relit_by.values()]  # 2 scenes a HDRI, the fine ones
    assert min(counts) == 2 and sum(counts) == 2 * len(RECIPES)  # (issue 30) add two more


def _relit(record, hdri_psnr, sun_psnr, relative=0.1):
    record["relit"] = {
        "lights": {name: {"light": {"name": name, "kind": kind}, "psnr_mean": psnr,
                          "ssim_mean": 0.9}
                   for name, kind, psnr in (("a", "hdri", hdri_psnr[0]),
                                            ("b", "hdri", hdri_psnr[1]),
                                            ("sun", "sun", sun_psnr))},
        "albedo": {"rmse": 0.01, "rmse_raw": 0.02, "relative": relative,
                   "scale": [1.1, 1.0, 0.9]}}
    return record


def test_relit_summary_checks_issue_25s_targets():
    records = [_relit(_record("mug", "materials", 31.0), (29.0, 27.0), 26.0),
               _relit(_record("bowl", "materials", 30.0), (30.0, 31.0), 22.0, 0.3)]
    stats = table.summary(records)["materials"]
    assert stats["relit_hdri_psnr_mean"] == pytest.approx(29.25)
    assert stats["relit_drop_max"] == pytest.approx(3.0)  # the mug: 31 - mean(29, 27)
    assert stats["albedo_relative_mean"] == pytest.approx(0.2)
    met = {key: value["met"] for key, value in stats["targets"].items()}
    assert met["relit_hdri_psnr_mean"] and met["relit_drop_max"]
    assert not met["relit_sun_psnr_mean"]  # 24 dB mean against 25
    lines = table.relit_markdown(records).splitlines()
    assert len(lines) == 4 and "| mug | materials | 31.00 | a 29.00 / 0.900 |" in lines[2]
    assert "| 0.0200 / 0.0100 | 0.300 / - | 1.10 1.00 0.90 |" in lines[3]
    assert "relit_hdri_psnr_mean" not in table.summary([_record("mug", "materials", 31.0)])[
        "materials"]["targets"]
    assert "relit_drop_beyond_light_max" not in stats  # no record says what light explains
    assert lines[2].split(" | ")[6:8] == ["3.00", "-"]


def test_relit_summary_takes_the_light_level_off_the_drop():
    brighter = _relit(_record("critter", "materials", 40.0), (33.0, 33.0), 30.0)
    brighter["relit"]["expected_drop"] = 5.0  # its other HDRIs are brighter than its own
    level = _relit(_record("mug", "materials", 31.0), (29.0, 29.0), 26.0)
    level["relit"]["expected_drop"] = -0.5
    stats = table.summary([brighter, level])["materials"]
    assert stats["relit_drop_max"] == pytest.approx(7.0)
    assert stats["relit_drop_beyond_light_max"] == pytest.approx(2.5)  # the mug: 2 + 0.5
    assert not stats["targets"]["relit_drop_max"]["met"]  # the issue's target stays the raw drop
    assert table.relit_markdown([brighter]).splitlines()[2].split(" | ")[6:8] == ["7.00", "2.00"]
    assert any("beyond the light level" in line and "max 2.50 dB" in line
               for line in table.summary_lines({"materials": stats}))


def _srgb(linear):
    """The sRGB encoding (IEC 61966-2-1), written out here as the independent reference."""
    return np.where(linear <= 0.0031308, 12.92 * linear, 1.055 * linear ** (1 / 2.4) - 0.055)


def _flat_disc(value, size=24):
    image = np.zeros((2, size, size, 4), np.float32)
    y, x = np.mgrid[:size, :size] - (size - 1) / 2
    image[:, np.hypot(x, y) < size / 3] = (value, value, value, 1.0)
    return image


def test_expected_drop_is_the_srgb_cost_of_one_relative_error_under_brighter_light():
    fitted, light = _flat_disc(0.05), {"name": "bright", "kind": "hdri"}
    sun = {"name": "sun", "kind": "sun"}  # not an HDRI: left out of the mean
    assert light_level.expected_drop(fitted, {"bright": fitted, "sun": fitted * 0},
                                     [light, sun]) == pytest.approx(0.0, abs=1e-4)
    error = light_level.RELATIVE_ERROR

    def srgb_step(value):
        return _srgb(value * (1 + error)) - _srgb(value)

    for brighter in (4.0, 0.25):  # the same disc 4x brighter, then 4x darker
        relit = {"bright": _flat_disc(0.05 * brighter), "sun": fitted}
        expected = 20 * np.log10(srgb_step(0.05 * brighter) / srgb_step(0.05))
        assert light_level.expected_drop(fitted, relit, [light, sun]) == pytest.approx(
            expected, abs=0.01)
    assert expected < -2.0  # a darker relit light flatters it: a negative expected drop
    with pytest.raises(ValueError, match="no HDRI"):
        light_level.expected_drop(fitted, {"sun": fitted}, [sun])


def test_the_light_is_the_scenes_hdri_fixed_or_learned_without_it(tmp_path):
    from diffrec_bench.quality.job import SceneJob, optimize_command

    def command(light: str) -> list[str]:
        job = SceneJob("ring", tmp_path / "out", tmp_path / "cache", "materials", "preview",
                       64, 8, 2, 16, light=light)
        return optimize_command(job, tmp_path / "dataset", tmp_path / "sky.exr", tmp_path)

    fixed, learned = command("fixed"), command("learn")
    assert fixed[fixed.index("--light") + 1] == "fixed"
    assert fixed[fixed.index("--envmap") + 1] == str(tmp_path / "sky.exr")
    assert learned[learned.index("--light") + 1] == "learn" and "--envmap" not in learned
    without_hdri = [part for part in fixed if part not in ("--envmap", str(tmp_path / "sky.exr"))]
    assert [("learn" if part == "fixed" else part) for part in without_hdri] == learned
