"""A job's process starts with what its work imports already imported by the fork server."""

import multiprocessing
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(),
                                reason="no fork server on this platform (jobs are spawned)")


def test_a_jobs_first_optimizer_step_imports_nothing(tmp_path):
    """A job's process forked from the server's fork server builds the pass's optimiser and
    schedule and steps them without importing a module (torch's own optimisers would import
    ``torch._dynamo`` here: 1.3-1.8 s on a 2-core CPU)."""
    report = tmp_path / "imported.txt"
    job = (f"import sys, torch\n"
           f"before = set(sys.modules)\n"
           f"from diffrec.pipeline.optimizers import Adam, Schedule\n"
           f"p = torch.zeros(3, requires_grad=True)\n"
           f"optimizer = Adam([p], lr=0.1)\n"
           f"schedule = Schedule(optimizer, lambda step: 0.5 ** step)\n"
           f"(p - 1).square().sum().backward()\n"
           f"optimizer.step()\n"
           f"schedule.step()\n"
           f"assert float(p[0]) > 0\n"
           f"open({str(report)!r}, 'w').write(' '.join(sorted(set(sys.modules) - before)))\n")
    server = (f"from diffrec.server import job_process\n"
              f"process = job_process.context().Process(target=exec, args=({job!r},))\n"
              f"process.start()\n"
              f"process.join()\n"
              f"raise SystemExit(process.exitcode)\n")
    subprocess.run([sys.executable, "-c", server], check=True, timeout=300)
    assert report.read_text() == ""
