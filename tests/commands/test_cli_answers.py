"""The command line always answers (issue 31): ``status`` on a server with no jobs says so,
and ``serve`` says when and why it stopped."""

from __future__ import annotations

from helpers.servers import ServerProcess

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


def test_serve_stops_quietly_when_nobody_reads_its_output_any_more(tmp_path):
    """The demo's backend: its output is a pipe; if the reader is gone first, the last line
    is dropped, with no traceback and exit status 0."""
    import signal
    import subprocess
    import sys

    server = subprocess.Popen([sys.executable, "-m", "diffrec", "serve", "--bind",
                               "tcp://127.0.0.1:*", "--data-dir", str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "serving on tcp://127.0.0.1:" in server.stdout.readline()
        server.stdout.close()
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
        assert server.stderr.read() == ""
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_the_stop_sentence_says_what_becomes_of_unfinished_jobs_on_each_kind_of_server(tmp_path):
    from diffrec.commands.serve import stopped_sentence

    alone = stopped_sentence("SIGINT", tmp_path, None)
    assert alone.endswith(f"resume when it starts again with --data-dir {tmp_path}")
    own_ray = stopped_sentence(None, tmp_path, "local")  # its Ray stops with it
    assert own_ray.startswith("diffrec serve stopped: unfinished jobs resume")
    assert own_ray.endswith(f"--data-dir {tmp_path} --cluster local")
    cluster = stopped_sentence("SIGTERM", tmp_path, "head:6379")  # jobs outlive the gateway
    assert "go on running on the Ray cluster" in cluster and "resume" not in cluster
    assert cluster.endswith(f"re-attaches to them when it starts again with --data-dir "
                            f"{tmp_path} --cluster head:6379")
