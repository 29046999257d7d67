"""scripts/bench_passes.py's ``--set NAME=VALUE``: values read as JSON where they parse (numbers,
lists, booleans), as strings otherwise, and malformed pairs refused before any run."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import bench_passes


def test_set_reads_json_values_and_falls_back_to_strings():
    args = bench_passes.parse_args([
        "config.json", "--set", "hash_grid_precision=float32", "--set", "batch=4",
        "--set", "kd_min=[0.1, 0.2, 0.3]", "--set", "lock_light=true", "--set", "seed=1=2",
    ])
    assert args.settings == [("hash_grid_precision", "float32"), ("batch", 4),
                             ("kd_min", [0.1, 0.2, 0.3]), ("lock_light", True), ("seed", "1=2")]


@pytest.mark.parametrize("pair", ["batch", "=4"])
def test_set_refuses_a_pair_without_a_name_and_a_value(pair, capsys):
    with pytest.raises(SystemExit):
        bench_passes.parse_args(["config.json", "--set", pair])
    assert "NAME=VALUE" in capsys.readouterr().err
