"""The command line always answers (issue 31): ``status`` on a server with no jobs says so,
and ``serve`` says when and why it stopped."""

from __future__ import annotations

from server_helpers import ServerProcess

from diffrec import cli


def test_status_with_no_jobs_and_serve_stopping_each_print_a_line(tmp_path, capsys):
    server = ServerProcess(tmp_path / "data").start()
    try:
        assert cli.main(["status", "--server", server.address, "--timeout", "2"]) == 0
        assert capsys.readouterr().out == (f"no jobs of yours on {server.address} "
                                           "(diffrec submit sends one)\n")
    finally:
        server.stop()
    assert server.process.returncode == 0
    last = server.log.read_text().strip().splitlines()[-1]
    assert last == (f"diffrec serve stopped on SIGTERM: unfinished jobs resume when it starts "
                    f"again with --data-dir {tmp_path / 'data'}")
