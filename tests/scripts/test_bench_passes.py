"""scripts/bench_passes.py without a GPU: ``--set NAME=VALUE`` (values read as JSON where they
parse, as strings otherwise, malformed pairs refused before any run) and where the peak memory
is placed."""


import pytest

from diffrec_bench import passes as bench_passes


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


def test_the_peak_is_placed_between_the_two_records_around_its_first_arrival(tmp_path):
    reporter = bench_passes.TimingReporter(str(tmp_path))
    assert reporter.peak_reached() is None  # nothing recorded (a CPU run)
    reporter.peaks = [("the targets rendered", 1000.0), ("pass1 iteration 0", 2500.0),
                      ("pass1 iteration 10", 7664.0), ("pass2 iteration 0", 7664.0),
                      ("the run's end", 7664.0)]
    assert reporter.peak_reached() == ("7,664 MiB, reached between pass1 iteration 0 and "
                                       "pass1 iteration 10")
    reporter.peaks = [("the targets rendered", 7664.0), ("the run's end", 7664.0)]
    assert reporter.peak_reached() == ("7,664 MiB, reached between the start and the targets "
                                       "rendered")
