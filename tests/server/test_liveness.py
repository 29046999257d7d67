"""Liveness over real sockets: a client notices a hung (SIGSTOPped) server by its silence,
reconnects and attaches again; a dead one makes it raise ServerUnavailable within about
``retry_for`` instead of hanging; a follower says a killed server stopped within seconds and
follows again once it is restarted (or says the job was lost); the server heartbeats attached
connections and drops the subscriptions of silent ones. And a smoke run of
scripts/bench_transfer.py."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq
from helpers.servers import ServerProcess, fit_spec, server_in_process, target_images

from diffrec.protocol import PROTOCOL_VERSION, Client, ServerUnavailable
from diffrec.protocol import channel as channel_module
from diffrec.protocol.errors import JobLost
from diffrec.protocol.limits import HEARTBEAT_S, STOPPED_AFTER_S
from diffrec.protocol.message import decode, encode
from diffrec.protocol.schema import SERVER_MESSAGES
from diffrec.server import app

REPO = Path(__file__).resolve().parents[2]
CLIENT_LOG = "diffrec.protocol.channel"
HUNG_S = 4.0
"""How long a hung server stays stopped: longer than the client's timeout plus a heartbeat."""


class Freezer:
    """SIGSTOPs a server child and SIGCONTs it ``seconds`` later from a timer thread, and at
    the latest in ``thaw`` (call it in a ``finally``). Times are ``time.time()``, as in log
    records."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.stopped_at: float | None = None
        self.resumed_at: float | None = None
        self._timer: threading.Timer | None = None

    def freeze(self, seconds: float) -> None:
        self.stopped_at = time.time()
        self.process.send_signal(signal.SIGSTOP)
        self._timer = threading.Timer(seconds, self.thaw)
        self._timer.start()

    def thaw(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.stopped_at is not None and self.resumed_at is None:
            self.resumed_at = time.time()
        self.process.send_signal(signal.SIGCONT)  # a no-op once it has exited


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise TimeoutError in the main thread if the block runs longer than ``seconds`` (so a
    client that never notices anything fails the test instead of hanging it)."""

    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def reconnects(caplog, since: float) -> list[float]:
    """When the client logged a reconnect, from ``since`` (time.time()) on."""
    return [record.created for record in caplog.records
            if record.name == CLIENT_LOG and "reconnecting" in record.getMessage()
            and record.created >= since]


def long_fit(iterations: int = 2000) -> dict:
    """A fit_texture job of a second or so on a CPU, without checkpoints or previews to slow it."""
    return fit_spec(iterations=iterations, checkpoint_every=iterations, preview_every=iterations)


# -- a hung server --------------------------------------------------------------------------


def test_a_waiting_client_notices_a_hung_server_reconnects_and_gets_the_end(
        start_server, connect, caplog):
    caplog.set_level(logging.INFO, logger=CLIENT_LOG)
    server = start_server()
    timeout = 1.0
    client = connect(server, timeout=timeout, retry_for=20.0)
    spec = long_fit()
    client.submit("hung", spec, {"images": target_images()})
    freezer = Freezer(server.process)
    events = []

    def on_event(event):
        events.append((time.time(), event))
        if event["kind"] == "progress" and freezer.stopped_at is None:
            freezer.freeze(HUNG_S)

    try:
        with deadline(45):
            final = client.wait("hung", on_event=on_event)
    finally:
        freezer.thaw()
    assert final["kind"] == "done", final.fields
    assert freezer.stopped_at is not None, "no progress event before the end"
    stopped_during = next(e for _, e in events if e["kind"] == "progress")
    assert stopped_during["iteration"] < spec["iterations"]  # the job was still running
    # The client noticed the silence after its timeout (plus at most a heartbeat period),
    # while the server was still stopped: the TCP connection alone never told it.
    seen = reconnects(caplog, freezer.stopped_at)
    assert seen, "the client never noticed that the server had stopped answering"
    noticed_after = seen[0] - freezer.stopped_at
    assert timeout - 0.05 <= noticed_after <= timeout + HEARTBEAT_S + 1.0, noticed_after
    assert seen[0] < freezer.resumed_at
    # The end came over the new connection, once the server was running again.
    done_at = next(at for at, e in events if e["kind"] == "done")
    assert done_at >= freezer.resumed_at
    assert client.status("hung")["attempts"] == 1  # paused, not restarted


def test_a_waiting_client_recovers_from_a_hang_longer_than_its_backoff_ramp(
        start_server, connect, caplog, monkeypatch):
    """Once the reconnect backoff grew past the ping period, each new connection must still
    get time to answer (it once got none, and the client gave up at retry_for although the
    server was back). The client pings 4 times a second here so that this comes in ~2 s.
    ``retry_for`` leaves room for a loaded machine: on 2 busy cores the client was once held up
    4 s and gave up at 10 s (with the bug it gives up at any ``retry_for``)."""
    caplog.set_level(logging.INFO, logger=CLIENT_LOG)
    ping_s = 0.25
    monkeypatch.setattr(channel_module, "HEARTBEAT_S", ping_s)
    server = start_server()
    client = connect(server, timeout=0.5, retry_for=20.0)
    client.submit("hung_long", long_fit(), {"images": target_images()})
    freezer = Freezer(server.process)
    done_at = []

    def on_event(event):
        if event["kind"] == "progress" and freezer.stopped_at is None:
            freezer.freeze(3.0)
        elif event["kind"] == "done":
            done_at.append(time.time())

    try:
        with deadline(45):
            final = client.wait("hung_long", on_event=on_event)
    finally:
        freezer.thaw()
    assert final["kind"] == "done", final.fields
    backoffs = [record.args[1] for record in caplog.records
                if record.name == CLIENT_LOG and "reconnecting" in record.getMessage()
                and freezer.stopped_at <= record.created < freezer.resumed_at]
    assert backoffs and max(backoffs) > ping_s, backoffs  # the case this test is about
    assert done_at[0] - freezer.resumed_at < 5.0 + 2.0  # the backoff is at most 5 s


def test_a_request_to_a_hung_server_is_repeated_until_it_answers(start_server, connect, caplog):
    caplog.set_level(logging.INFO, logger=CLIENT_LOG)
    server = start_server()
    client = connect(server, timeout=0.5, retry_for=20.0)
    client.ping()
    freezer = Freezer(server.process)
    try:
        freezer.freeze(2.0)
        began = time.monotonic()
        reply = client.ping()
        took = time.monotonic() - began
    finally:
        freezer.thaw()
    assert reply["protocol"] == PROTOCOL_VERSION
    assert 1.9 <= took <= 2.0 + 2.0, took
    assert len(reconnects(caplog, freezer.stopped_at)) >= 2  # 0.5 s timeouts while stopped


# -- a dead server --------------------------------------------------------------------------


def test_a_request_to_a_dead_server_raises_server_unavailable_after_retry_for(
        start_server, connect):
    server = start_server()
    retry_for = 3.0
    client = connect(server, timeout=0.5, retry_for=retry_for)
    client.ping()
    server.kill()  # not started again
    began = time.monotonic()
    with deadline(30), pytest.raises(ServerUnavailable):
        client.ping()
    took = time.monotonic() - began
    assert retry_for - 1.0 <= took <= retry_for + 1.5, took


def test_a_client_waiting_on_a_dead_server_raises_server_unavailable_after_retry_for(
        start_server, connect):
    server = start_server()
    retry_for = 3.0
    client = connect(server, timeout=1.0, retry_for=retry_for)
    client.submit("orphan", long_fit(), {"images": target_images()})
    killed_at = []

    def on_event(event):
        if event["kind"] == "progress" and not killed_at:
            server.kill()  # not started again
            killed_at.append(time.monotonic())

    with deadline(30), pytest.raises(ServerUnavailable):
        client.wait("orphan", on_event=on_event)
    took = time.monotonic() - killed_at[0]
    assert retry_for - 0.5 <= took <= retry_for + HEARTBEAT_S + 2.0, took


# -- a killed and restarted server -----------------------------------------------------------


def _follow_through_a_restart(server, restart, connect):
    """Follow a job; SIGKILL ``server`` at its first progress event and call ``restart`` once the
    client reports it stopped. The final event (or the JobLost raised), [(seconds since the
    kill, change)] and the client."""
    client = connect(server, timeout=2.0, retry_for=60.0)
    client.submit("phoenix", long_fit(), {"images": target_images()})
    killed_at, changes = [], []

    def on_event(event):
        if event["kind"] == "progress" and not killed_at:
            server.kill()
            killed_at.append(time.monotonic())

    def on_link(change):
        changes.append((time.monotonic() - killed_at[0], change))
        if change == "stopped":
            restart()

    with deadline(90):
        try:
            final = client.wait("phoenix", on_event=on_event, on_link=on_link)
        except JobLost as lost:
            final = lost
    return final, changes, client


@pytest.mark.slow  # two server starts and a job resumed: 20-25 s
def test_a_follower_says_the_server_stopped_and_follows_again_after_a_restart(
        start_server, connect):
    server = start_server()
    final, changes, client = _follow_through_a_restart(server, server.start, connect)
    assert [change for _, change in changes] == ["stopped", "restarted"], changes
    stopped_after = changes[0][0]
    assert STOPPED_AFTER_S <= stopped_after <= STOPPED_AFTER_S + HEARTBEAT_S + 1.0, changes
    assert final["kind"] == "done", final.fields  # the restarted server resumed and finished
    assert client.status("phoenix")["state"] == "done"


@pytest.mark.slow  # two server starts and a job resumed: 20-25 s
def test_a_follower_says_the_job_was_lost_when_the_restarted_server_does_not_know_it(
        start_server, connect, tmp_path):
    server = start_server()
    elsewhere = ServerProcess(tmp_path / "other-data", port=server.port)
    try:
        final, changes, _ = _follow_through_a_restart(server, elsewhere.start, connect)
    finally:
        elsewhere.kill()
    assert isinstance(final, JobLost) and final.job == "phoenix", final
    assert "the job was lost" in final.message
    assert [change for _, change in changes] == ["stopped"], changes


# -- the server's side ----------------------------------------------------------------------


def test_the_server_heartbeats_attached_connections_and_drops_silent_ones(tmp_path,
                                                                          monkeypatch):
    peer_timeout = 2.0
    monkeypatch.setattr(app, "PEER_TIMEOUT_S", peer_timeout)  # 10 s in the protocol
    context = zmq.Context.instance()
    with server_in_process(tmp_path / "data") as server, \
            Client(server.endpoint, timeout=2.0, retry_for=10.0) as client:
        client.submit("beat", fit_spec(iterations=5), {"images": target_images()})
        assert client.wait("beat")["kind"] == "done"
        quiet, chatty = (context.socket(zmq.DEALER) for _ in range(2))
        heard: dict[zmq.Socket, list[float]] = {quiet: [], chatty: []}
        try:
            for socket in heard:
                socket.linger = 0
                socket.connect(server.endpoint)
                socket.send_multipart(encode("attach", {"id": 1, "job": "beat"}))
            began = last_ping = time.monotonic()
            poller = zmq.Poller()
            for socket in heard:
                poller.register(socket, zmq.POLLIN)
            while (now := time.monotonic()) < began + peer_timeout + 3 * HEARTBEAT_S:
                if now - last_ping >= HEARTBEAT_S / 2:  # chatty keeps its subscription
                    chatty.send_multipart(encode("ping", {"id": 2}))
                    last_ping = now
                for socket, _ in poller.poll(100):
                    message = decode(socket.recv_multipart(), SERVER_MESSAGES)
                    if message.op == "heartbeat":
                        heard[socket].append(time.monotonic() - began)
            end = time.monotonic() - began
        finally:
            for socket in heard:
                socket.close(linger=0)
    assert len(heard[chatty]) >= 4 and heard[chatty][-1] > end - 1.5 * HEARTBEAT_S, heard
    # quiet said nothing after attaching: heartbeats until PEER_TIMEOUT_S, then nothing
    assert heard[quiet], "no heartbeat to an attached connection"
    assert heard[quiet][-1] <= peer_timeout + HEARTBEAT_S + 0.25, heard
    assert end - heard[quiet][-1] >= 1.5 * HEARTBEAT_S, heard


# -- the transfer benchmark ------------------------------------------------------------------


def test_the_transfer_benchmark_runs_and_reports_byte_identical(tmp_path):
    path = os.pathsep.join(filter(None, [str(REPO / "backend"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    run = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_transfer.py"),
                          "--mib", "24", "--repeat", "1", "--tmp", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert re.search(r"^byte-identical +True$", out, re.M), out
    assert re.search(r"^payload +24 MiB", out, re.M), out
    for name in ("upload", "download"):
        best = re.search(rf"^{name} +best ([0-9.]+) GiB/s \([0-9.]+ s\), median ", out, re.M)
        assert best and float(best.group(1)) > 0, out
    assert re.search(r"^run 1 +upload [0-9.]+ GiB/s .*re-upload .*download [0-9.]+ GiB/s",
                     out, re.M), out
    assert list(tmp_path.iterdir()) == []  # its temporary directory is gone
