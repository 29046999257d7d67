"""The peer benchmark against Blender's route (scripts/bench_bake_peer.py), its cheap parts:
the assets it builds have the triangles and materials issue 50 asks for, a result is judged
alone in the scene, and the table and the targets read the records right."""

import dataclasses

import numpy as np
import pytest

pytestmark = pytest.mark.blender


@pytest.fixture(scope="module")
def built():
    """Each asset built in a fresh scene, described before the next one clears it: {name:
    {triangles, materials, the shader nodes' kinds, principled inputs that are linked, colour
    ramps' interpolations, share of the area marked metal (None: no mark), the coat's weight
    and roughness (0, 0 without a Principled BSDF), bounding-box corners}}."""
    bpy = pytest.importorskip("bpy")
    from diffrec_bench.bake_peer import assets
    from diffrec_bench.bake_peer.catalogue import ASSETS
    from diffrec_bench.demo import scene as demo_scene

    out = {}
    for name in ASSETS:
        demo_scene.empty_scene(16, 1, use_gpu=False)
        obj = assets.build(name)
        assert len(bpy.data.objects) == 1  # parts joined into one object, nothing left over
        nodes = obj.data.materials[0].node_tree.nodes
        principled = [n for n in nodes if n.bl_idname == "ShaderNodeBsdfPrincipled"]
        metal = obj.data.attributes.get(assets.METAL)
        values, areas = (np.empty(len(obj.data.polygons), np.float32) for _ in range(2))
        obj.data.polygons.foreach_get("area", areas)
        if metal is not None:
            metal.data.foreach_get("value", values)
        out[name] = {
            "triangles": assets.triangles(obj), "materials": len(obj.data.materials),
            "principled": len(principled),
            "shaders": sorted(n.bl_idname for n in nodes if "Bsdf" in n.bl_idname
                              or n.bl_idname == "ShaderNodeMixShader"),
            "linked": {s.name for p in principled[:1] for s in p.inputs if s.is_linked},
            "ramps": {n.color_ramp.interpolation for n in nodes
                      if n.bl_idname == "ShaderNodeValToRGB"},
            "metal": None if metal is None else float((values * areas).sum() / areas.sum()),
            "coat": tuple(principled[0].inputs[name].default_value if principled else 0.0
                          for name in ("Coat Weight", "Coat Roughness")),
            "corners": np.array([list(corner) for corner in obj.bound_box])}
    return out


def test_each_asset_is_one_heavy_triangulated_object_inside_the_unit_sphere(built):
    for name, asset in built.items():
        assert 200_000 <= asset["triangles"] <= 350_000, name
        assert asset["materials"] == 1, name
        radius = np.linalg.norm(asset["corners"], axis=1).max()
        assert radius == pytest.approx(1.0, abs=1e-4), name  # centred, fits the unit sphere


def test_materials_have_the_sharp_features_and_metal_the_issue_names(built):
    for name, asset in built.items():
        assert asset["ramps"] == {"CONSTANT"}, name
        if name == "mixed":  # no Principled BSDF: a diffuse and a glossy shader mixed
            assert asset["shaders"] == ["ShaderNodeBsdfAnisotropic", "ShaderNodeBsdfDiffuse",
                                        "ShaderNodeMixShader"]
            continue
        assert asset["principled"] == 1, name  # one Principled BSDF: what the bake reads
        assert {"Base Color", "Roughness"} <= asset["linked"], name
    assert 0.05 < built["hard_surface"]["metal"] < 0.4  # the cap and feet, not the housing
    assert "Metallic" in built["hard_surface"]["linked"]
    assert built["sculpt"]["metal"] is None and "Metallic" not in built["sculpt"]["linked"]
    # a clear coat, the layer the baked maps cannot hold, on the glazed pot alone
    assert ({name: asset["coat"][0] for name, asset in built.items()}
            == {name: 1.0 if name == "glazed" else 0.0 for name in built})
    assert built["glazed"]["coat"][1] < 0.1
    corners = built["chair"]["corners"]
    height = corners[:, 2].max() - corners[:, 2].min()
    assert height > 1.5  # tall and narrow: legs 0.05 units across, 3 % of its height


def test_a_result_is_judged_alone_and_the_others_come_back():
    bpy = pytest.importorskip("bpy")
    from diffrec_bench.bake_peer.routes import alone
    from diffrec_bench.demo import scene as demo_scene

    scene = demo_scene.empty_scene(16, 1, use_gpu=False)
    bpy.ops.mesh.primitive_cube_add()
    first = bpy.context.view_layer.objects.active
    bpy.ops.mesh.primitive_uv_sphere_add()
    second = bpy.context.view_layer.objects.active
    with alone(first):
        assert [obj.name for obj in scene.objects if obj.type == "MESH"] == [first.name]
    assert {obj.name for obj in scene.objects} == {first.name, second.name}


def test_the_base_colour_is_the_principled_bsdfs_or_else_the_diffuse_bsdfs():
    """The judge's base-colour render shows what feeds the Principled BSDF's Base Color; a
    material without one (the mixed asset's) shows its Diffuse BSDF's Color."""
    bpy = pytest.importorskip("bpy")
    from diffrec_bench.bake_peer import assets
    from diffrec_bench.demo import scene as demo_scene
    from diffrec_bench.quality.relight import show_base_colour

    demo_scene.empty_scene(16, 1, use_gpu=False)
    for name, shader, socket in (("sculpt", "ShaderNodeBsdfPrincipled", "Base Color"),
                                 ("mixed", "ShaderNodeBsdfDiffuse", "Color")):
        material = assets.BUILDERS[name][1]()
        tree = material.node_tree
        fed = next(n for n in tree.nodes if n.bl_idname == shader).inputs[socket]
        source = fed.links[0].from_socket
        show_base_colour(material)
        surface = tree.get_output_node("CYCLES").inputs["Surface"].links[0].from_node
        assert surface.bl_idname == "ShaderNodeEmission", name
        assert surface.inputs["Color"].links[0].from_socket == source, name
    plain = bpy.data.materials.new("glossy only")
    plain.node_tree.nodes.clear()
    plain.node_tree.nodes.new("ShaderNodeBsdfAnisotropic")
    with pytest.raises(ValueError, match="no Principled or Diffuse BSDF"):
        show_base_colour(plain)


def _record(fraction, bake, fit, seconds=(60.0, 180.0)):
    from diffrec_bench.bake_peer.lights import judging_lights

    lights = judging_lights("sculpt")

    def scores(psnr):
        return {"psnr_mean": psnr, "ssim_mean": 0.9, "iou_mean": 0.99}

    def route(psnr):
        return {"lights": {light["name"]: scores(psnr) for light in lights},
                "albedo": {"rmse": 0.01, "relative": 0.05}, "triangles": 3277}

    return {"asset": "sculpt", "fraction": fraction, "budget": 3277, "lights": lights,
            "commit": "0123456789abcdef+dirty", "ceiling": {light["name"]: scores(30.0)
                                                      for light in lights},
            "routes": {"baseline": route(20.0), "bake": route(bake), "diffrec": route(fit)},
            "time_s": {"blender_route": seconds[0], "diffrec_route": seconds[1]}}


def test_lights_are_the_fitted_hdri_another_and_the_sun():
    from diffrec_bench.bake_peer.catalogue import ASSETS
    from diffrec_bench.bake_peer.lights import judging_lights

    for name, asset in ASSETS.items():
        lights = judging_lights(name)
        assert [light["role"] for light in lights] == ["fitted", "other", "sun"]
        assert lights[0]["hdri"] == asset["hdri"] != lights[1]["hdri"]
    assert [light["role"] for light in judging_lights("chair", ("sun",))] == ["sun"]


def test_table_and_targets_read_the_gain_over_the_bake():
    from diffrec_bench.bake_peer import table

    records = [_record(0.01, bake=25.0, fit=27.0), _record(0.05, bake=26.0, fit=26.5,
                                                           seconds=(60.0, 200.0))]
    text = table.markdown(records)
    assert "| +2.00 |" in text and "| +0.50 |" in text
    assert "25.00 / 0.900 / 0.9900" in text
    assert "| 012345678+dirty |" in text  # the commit shortened, its state kept
    albedo = table.albedo_markdown(records)
    assert albedo.count("0.0100 / 0.050") == 6  # both runs, three routes
    stats = table.summary(records)
    assert stats["1 %"]["fitted_gain_mean"] == pytest.approx(2.0)
    assert stats["1 %"]["targets"]["fitted_gain_mean"]["met"]
    assert not stats["5 %"]["targets"]["fitted_gain_mean"]["met"]  # +0.5 against +1
    assert not stats["5 %"]["targets"]["time_ratio_max"]["met"]  # 200 / 60 > 3


def _script():
    """scripts/bench_bake_peer.py as a module (scripts are not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "bench_bake_peer.py"
    spec = importlib.util.spec_from_file_location("bench_bake_peer_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_judge_renders_with_samples_of_its_own():
    pytest.importorskip("bpy")
    from diffrec_bench.bake_peer.truth import truth_key

    script = _script()
    default = script.jobs_for(script.parse_args(["--assets", "sculpt", "--budgets", "1"]))[0]
    assert (default.samples, default.judge_samples) == (16, 64)
    quick = script.parse_args(["--quick"])
    assert (quick.samples, quick.judge_samples) == (16, 16)
    sharper = script.jobs_for(script.parse_args(["--assets", "sculpt", "--budgets", "1",
                                                 "--judge-samples", "256"]))[0]
    assert sharper.judge_samples == 256 and sharper.samples == 16
    # the truth is cached apart: a judge at other samples never reads another's renders
    assert truth_key(sharper) != truth_key(default)
    with pytest.raises(SystemExit):
        script.parse_args(["--judge-samples", "0"])


def test_another_judge_seed_reuses_the_truth_and_changes_only_the_judging_renders():
    pytest.importorskip("bpy")
    from diffrec_bench.bake_peer.truth import truth_key
    from diffrec_bench.quality.judging import JUDGE_SEED

    script = _script()
    default = script.jobs_for(script.parse_args(["--assets", "sculpt", "--budgets", "1"]))[0]
    reseeded = script.jobs_for(script.parse_args(["--assets", "sculpt", "--budgets", "1",
                                                  "--judge-seed", "7"]))[0]
    assert default.judge_seed == JUDGE_SEED and reseeded.judge_seed == 7
    assert truth_key(reseeded) == truth_key(default)
    assert dataclasses.replace(reseeded, judge_seed=JUDGE_SEED) == default
