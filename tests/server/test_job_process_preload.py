"""A job's process starts with what its work imports already imported by the fork server."""

import multiprocessing
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(),
                                reason="no fork server on this platform (jobs are spawned)")


def test_a_jobs_first_optimizer_imports_nothing(tmp_path):
    """torch imports ``torch._dynamo`` when a process builds its first optimizer (1.4-1.8 s on
    a 2-core CPU); a job's process forked from the server's fork server has it already."""
    report = tmp_path / "imported.txt"
    job = (f"import sys, torch\n"
           f"before = set(sys.modules)\n"
           f"torch.optim.Adam([torch.zeros(1, requires_grad=True)])\n"
           f"open({str(report)!r}, 'w').write(' '.join(sorted(set(sys.modules) - before)))\n")
    server = (f"from diffrec.server import job_process\n"
              f"process = job_process.context().Process(target=exec, args=({job!r},))\n"
              f"process.start()\n"
              f"process.join()\n"
              f"raise SystemExit(process.exitcode)\n")
    subprocess.run([sys.executable, "-c", server], check=True, timeout=300)
    assert report.read_text() == ""
