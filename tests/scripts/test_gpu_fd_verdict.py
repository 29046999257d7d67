"""scripts/gpu_fd_verdict.py on the CPU (the torch engine's rows only): the verdict machinery
must find the torch engine's gradients right, since the CPU tests check them against float64
finite differences, before its nvdiffrast rows are trusted on a GPU."""

import json

import pytest
import torch

from diffrec_bench import gpu_fd_verdict


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    path = tmp_path_factory.mktemp("fd") / "rows.jsonl"
    gpu_fd_verdict.main(["--device", "cpu", "--coordinates", "40", "--texels", "20",
                         "--json", str(path)])
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_torch_antialias_gradient_matches_its_finite_differences(rows):
    by_engine = {row["engine"]: row for row in rows if row["check"] == "antialias d/dpos"}
    assert set(by_engine) == {"torch (walk, as optimised)", "torch (walk off)"}
    walk_off = by_engine["torch (walk off)"]
    assert walk_off["elements"] >= 30  # few coordinates sit on a jump of the forward pass
    assert walk_off["relative_l2"] < 0.03 and walk_off["within_5pct"] > 0.9
    assert abs(walk_off["median_ratio"] - 1) < 0.01
    assert by_engine["torch (walk, as optimised)"]["relative_l2"] < 0.1


def test_torch_antialias_moves_vertical_and_slanted_edges_as_a_box_filter_does(rows):
    edge = [row for row in rows if "edge" in row["check"] and "box filter" in row["check"]]
    assert [row["engine"] for row in edge] == ["torch"] * 4
    assert any("slanted" in row["check"] for row in edge)
    for row in edge:  # forward slope and gradient: 1 per pixel of edge motion, every row
        assert row["elements"] == 16 and row["relative_l2"] < 1e-3, row


def test_texel_gradients_are_exact_for_a_lookup_linear_in_the_texels(rows):
    texture = [row for row in rows if row["check"].startswith("texture")]
    assert {row["check"] for row in texture} == {
        "texture linear-mipmap-linear zero d/dtex", "texture linear-mipmap-linear cube d/dtex",
        "texture linear-mipmap-linear wrap d/dtex", "texture linear-mipmap-nearest zero d/dtex"}
    for row in texture:
        assert row["elements"] == 20 and row["disagreeing_texels"] == 0
        assert row["relative_l2"] < 1e-4, row


def test_a_wrong_gradient_is_called_wrong():
    differences = torch.tensor([1.0, -2.0, 3.0, 0.5])
    row = gpu_fd_verdict.verdict("x", "y", 0.5 * differences, differences)
    assert row["median_ratio"] == pytest.approx(0.5)
    assert row["relative_l2"] == pytest.approx(0.5) and row["within_5pct"] == 0
