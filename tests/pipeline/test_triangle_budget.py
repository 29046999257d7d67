"""The triangle budget (``target_triangles``): materials and refine decimate the base mesh to
it before fitting (and unwrap it anew), reconstruct simplifies its surface to it; the result
never has more triangles, and says how many it has in its metrics."""

import logging

import pytest
import torch
from running import Lines, config
from stand_ins import ball_asset, render, ring_cameras, sky

from diffrec import cli
from diffrec.commands.optimize import settings_flags
from diffrec.geometry import piece_count
from diffrec.io import Material
from diffrec.mesh import Mesh
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.config import build_config
from diffrec.pipeline.initial_state import averaged, has_textures
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.reporter import Reporter
from diffrec.pipeline.run import _decimated, optimize
from diffrec.pipeline.views import Views
from diffrec.protocol.settings import SettingsError, parse_settings

SIZE = 32


def _views(count: int) -> Views:
    cameras = ring_cameras(count, SIZE, SIZE)
    return Views(cameras, render(cameras))


def _run(tmp_path, **values) -> tuple[dict, Lines]:
    """A two-iteration run on the stand-ins' ball (``values``: settings); its metrics and
    log lines."""
    run = config(tmp_path, train_res=SIZE, texture_res=16, iterations=2, plateau_window=0,
                 test_views=1, **values)
    lines = Lines()
    result = optimize(run.settings, Inputs(_views(4), _views(1), ball_asset().mesh, sky()),
                      lines, device="cpu")
    assert result.mesh.num_triangles == result.metrics["triangles"]
    return result.metrics, lines


def test_materials_decimates_the_base_mesh_to_the_budget(tmp_path, caplog):
    mesh = ball_asset().mesh
    with caplog.at_level(logging.INFO):
        metrics, lines = _run(tmp_path, mode="materials", target_triangles=150)
    # UVs the decimation dropped are not "not used" (said twice before), only unwrapped anew
    assert not [line for line in caplog.messages if "not using the mesh's UVs" in line]
    assert lines.lines.count("unwrapping the surface…") == 1
    assert mesh.num_triangles > 400
    assert 75 <= metrics["triangles"] <= 150 and metrics["target_triangles"] == 150
    assert metrics["unwrap"]["method"] != "own UVs", "decimation loses the UVs: unwrapped anew"
    assert f"decimated {mesh.num_triangles:,} -> {metrics['triangles']:,} triangles " \
           "(target_triangles 150)" in lines.lines


@pytest.mark.slow
def test_reconstruct_simplifies_its_surface_to_the_budget(tmp_path):
    metrics, lines = _run(tmp_path, mode="reconstruct", dmtet_grid=16, target_triangles=60)
    assert metrics["unwrap"]["extracted_triangles"] > 60
    assert metrics["triangles"] <= 60 and metrics["target_triangles"] == 60
    assert any(line.startswith("simplified pass 1's surface ") for line in lines.lines)


def test_reconstructs_surface_budget_is_the_smaller_of_the_two_limits():
    def budget(**values):
        return parse_settings({"mode": "reconstruct", **values}).surface_triangles()

    assert budget() == 20000, "max_triangles alone"
    assert budget(target_triangles=3300) == 3300
    assert budget(target_triangles=50000) == 20000
    assert budget(max_triangles=0, target_triangles=3300) == 3300
    assert budget(max_triangles=0) == 0, "no limit at all"


def test_a_mesh_within_the_budget_is_left_as_it_is_with_its_uvs():
    mesh = uv_sphere(16, 8)
    assert mesh.uvs is not None
    for budget in (0, mesh.num_triangles, mesh.num_triangles + 1):
        assert _decimated(mesh, budget, Reporter(), []) is mesh


def test_a_decimated_mesh_keeps_no_attribute_of_its_old_triangles():
    mesh = uv_sphere(16, 8)
    normals = mesh.positions / mesh.positions.norm(dim=-1, keepdim=True)
    mesh = mesh.replace(normals=normals, normal_triangles=mesh.triangles)
    warnings = []
    decimated = _decimated(mesh, 100, Reporter(), warnings)
    assert decimated.num_triangles <= 100 and warnings == [], "one piece, kept"
    assert (decimated.uvs, decimated.normals, decimated.tangents) == (None, None, None)
    assert (decimated.positions.norm(dim=-1) - 1).abs().max() < 0.1, "still the sphere"


def test_pieces_the_budget_takes_away_entirely_are_said():
    """Thirty tetrahedra at a budget of 20 triangles: the collapse keeps some whole and takes
    the others away, which the warnings say (it was silent)."""
    tetrahedron = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    faces = torch.tensor([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    mesh = Mesh(torch.cat([tetrahedron + 3 * piece for piece in range(30)]),
                torch.cat([faces + 4 * piece for piece in range(30)]))
    warnings, lines = [], Lines()
    decimated = _decimated(mesh, 20, lines, warnings)
    kept = piece_count(decimated.positions, decimated.triangles)
    assert 0 < kept < 30 and decimated.num_triangles <= 20
    assert warnings == [f"{30 - kept} of the base mesh's 30 separate pieces collapsed to "
                        "nothing at target_triangles 20: allow more triangles to keep them, "
                        "or join the pieces"]
    assert warnings[0] in lines.lines


def test_a_base_material_whose_uvs_are_gone_starts_as_its_averages():
    kd = torch.rand(8, 8, 3)
    material = Material(kd=kd, ks=torch.tensor([0.0, 0.4, 1.0]), normal=torch.rand(8, 8, 3))
    assert has_textures(material) and not has_textures(Material())
    start = averaged(material)
    torch.testing.assert_close(start.kd, kd.mean((0, 1)))
    torch.testing.assert_close(start.ks, torch.tensor([0.0, 0.4, 1.0]))
    assert start.normal is None


def test_the_triangles_flag_sets_the_budget():
    parser = cli.build_parser()
    for command in (["optimize"], ["submit", "scene"]):
        args = parser.parse_args([*command, "--triangles", "3300"])
        assert build_config({}, settings_flags(args)).settings.surface.target_triangles == 3300
    args = parser.parse_args(["optimize"])
    assert build_config({}, settings_flags(args)).settings.surface.target_triangles == 0


def test_a_negative_budget_is_refused_with_a_sentence():
    with pytest.raises(SettingsError, match="target_triangles: must be at least 0, got -1"):
        parse_settings({"target_triangles": -1})


@pytest.mark.parametrize("name", ["target_triangles", "max_triangles"])
def test_a_budget_below_a_tetrahedron_is_refused_with_a_sentence(name):
    """1 to 3 triangles hold no closed surface (a sphere collapses to none or one)."""
    for budget in (1, 3):
        with pytest.raises(SettingsError, match=f"{name}: must be 0 .no limit. or at least 4"):
            parse_settings({name: budget})
    assert getattr(parse_settings({name: 4}).surface, name) == 4
