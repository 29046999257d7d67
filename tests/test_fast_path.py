"""The CUDA fast-path check: each probe in a child process, crashes and failures explained,
dependent probes skipped; on a machine without CUDA it says so and fails."""

import pytest
import torch

from diffrec import cli
from diffrec.fast_path import Check, check_fast_path, run_child


def test_a_child_that_crashes_is_reported_not_fatal():
    ok, detail = run_child("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert not ok and detail == "the process crashed (SIGSEGV)"


def test_a_child_that_fails_gives_its_last_error_line_and_one_that_hangs_times_out():
    assert run_child("raise ValueError('no such device')") == (False, "ValueError: no such device")
    assert run_child("print('a'); print('covers 512')") == (True, "covers 512")
    assert run_child("import time; time.sleep(30)", timeout=1.0) == (False,
                                                                      "no answer within 1 s")


def test_checks_that_need_a_failed_one_are_skipped_with_the_fix_said():
    checks = (Check("first", "raise RuntimeError('broken')", "rebuild it"),
              Check("second", "print('fine')", "-", needs="first"),
              Check("third", "print('fine')", "-"))
    outcomes = check_fast_path(checks)
    assert [o.ok for o in outcomes] == [False, None, True]
    assert outcomes[0].line() == "FAILED  first: RuntimeError: broken. Fix: rebuild it"
    assert outcomes[1].line() == "skipped second: needs first"
    assert outcomes[2].line() == "ok      third: fine"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU answer")
def test_info_check_without_cuda_says_so_and_fails(capsys):
    assert cli.main(["info", "--check"]) == 1
    lines = capsys.readouterr().out.splitlines()
    if torch.version.cuda is None:  # the fix names another index, not the default again
        assert lines[0] == (f"FAILED  CUDA build of torch: torch {torch.__version__} is a CPU "
                            "build. Fix: reinstall torch from PyTorch's CUDA index (`pip install "
                            "--force-reinstall torch==2.13.0 --index-url "
                            "https://download.pytorch.org/whl/cu128`, cu128 or another CUDA "
                            "version the driver supports: see nvidia-smi)")
        assert lines[1] == "skipped CUDA device: needs CUDA build of torch"
    else:
        assert lines[0].startswith(f"ok      CUDA build of torch: torch {torch.__version__} "
                                   f"for CUDA {torch.version.cuda}")
        assert lines[1].startswith("FAILED  CUDA device: torch sees no CUDA device. Fix: check "
                                   "that nvidia-smi lists the GPU")
    assert all(line.startswith("skipped") for line in lines[2:]) and len(lines) == 6


@pytest.mark.gpu
def test_info_check_passes_where_the_fast_path_is_installed(capsys):
    pytest.importorskip("nvdiffrast.torch")
    pytest.importorskip("tinycudann")
    code = cli.main(["info", "--check"])
    assert code == 0, capsys.readouterr().out
