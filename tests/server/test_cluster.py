"""``diffrec serve --cluster``: the gateway runs its jobs on a Ray cluster started by the test
(a head node without CPUs and two one-CPU worker nodes on this machine, sharing its disk).

Two jobs run at once (one per node) with progress, previews, cancel and fetch; the gateway is
killed mid-job and a new one re-attaches to the job still running on the cluster; a node is
killed mid-job and its job resumes from its checkpoint on another node, its results
byte-identical to an uninterrupted run's. Each wait is bounded; the cluster is shut down
after the module. First, without that cluster: the job actor's own contract and a smoke run
of scripts/bench_cluster.py (which starts clusters of its own), and the sentences for a
cluster that is not there. A gateway with a Ray of its
own (``--cluster local``) is test_private_ray's.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.servers import ServerProcess, fit_spec, free_port, target_images

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from diffrec.errors import UserError  # noqa: E402
from diffrec.protocol.events import Finished, Log, Outcome, Progress  # noqa: E402
from diffrec.server.cluster import JobActor, actor_name, namespace  # noqa: E402
from diffrec.server.job_process import JobOrder  # noqa: E402
from diffrec.server.texture_fit import TextureFitRunner  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

WAIT_S = 90.0
SPEC = fit_spec(iterations=6000, checkpoint_every=500, preview_every=1000)
"""About 1.5-3 s of work on one CPU, checkpointed every 500 iterations."""
LONG_SPEC = {**SPEC, "iterations": 60000, "preview_every": 10000}
"""About 15-30 s of work: a node killed after its first checkpoint is gone long before the
job could end (the kill itself takes up to a second or two to stop the actor's process)."""
FAST_FAILURE_DETECTION = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                          "health_check_failure_threshold": 4}
"""A lost node is noticed within about 2 s (Ray's default takes tens of seconds); a live node
on a loaded machine is not (a 0.6 s window took one for lost)."""


@pytest.fixture(scope="module")
def cluster():
    """The Ray cluster (this process is a driver of it, to find and kill the jobs' actors)."""
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "_system_config": FAST_FAILURE_DETECTION})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def gateway(cluster, start_server):
    """gateway(data_dir=None, port=None) → a `diffrec serve --cluster` child, killed after
    the test."""
    return lambda **where: start_server("--cluster", cluster.address, **where)


def until(condition, what: str, timeout: float = WAIT_S):
    """Poll ``condition()`` until it returns something true (returned); fail after
    ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"still waiting after {timeout} s for {what}")


def iteration(client, job: str) -> int:
    """The last iteration ``job`` reported (0 before its first progress event)."""
    return (client.status(job)["progress"] or {}).get("iteration", 0)


def actor_node(server: ServerProcess, job: str) -> str:
    """The Ray node id of the actor running ``job``."""
    actor = ray.get_actor(actor_name(job), namespace=namespace(server.data_dir))
    return ray.get(actor.where.remote(), timeout=WAIT_S)[1]


def alive(server: ServerProcess, job: str) -> bool:
    """Whether ``job``'s actor is there."""
    try:
        ray.get_actor(actor_name(job), namespace=namespace(server.data_dir))
        return True
    except ValueError:
        return False


def test_an_actor_buffers_numbered_events_and_drops_those_polled(tmp_path):
    actor = JobActor()
    assert actor.poll(0) == ([], False, None)
    for index in range(3):
        actor._emit(Log(str(index)))
    events, started, verdict = actor.poll(1)
    assert [(number, event.message) for number, event in events] == [(1, "1"), (2, "2")]
    assert actor.poll(3)[0] == [] and actor.poll(0)[0] == []  # gone once acknowledged
    assert (started, verdict) == (False, None)


def test_an_actor_runs_a_job_and_stops_when_asked(tmp_path):
    work, results = tmp_path / "job" / "checkpoint", tmp_path / "job" / "results"
    work.mkdir(parents=True)
    results.mkdir()
    fit = TextureFitRunner()
    order = JobOrder("unit", fit, fit.parse(fit_spec(iterations=10**6)),
                     JobOrder.portable({"images": target_images()}), work, results, "cpu")
    actor = JobActor()
    runner = threading.Thread(target=actor.run, args=(order,))
    runner.start()
    until(lambda: actor.poll(0)[0], "a progress event", timeout=30)
    actor.stop()
    runner.join(30)
    events, started, verdict = actor.poll(0)
    assert started and verdict == Finished(Outcome.CANCELLED)
    assert isinstance(events[0][1], Progress) and events[0][1].iterations == 10**6


def test_an_actor_that_does_not_see_the_data_directory_says_so(tmp_path):
    missing = tmp_path / "elsewhere" / "jobs" / "unit"
    fit = TextureFitRunner()
    order = JobOrder("unit", fit, fit.parse(fit_spec()), {}, missing / "checkpoint",
                     missing / "results", "cpu")
    actor = JobActor()
    actor.run(order)
    verdict = actor.poll(0)[2]
    outcome, message, results = verdict.outcome, verdict.message, verdict.results
    assert outcome == "failed" and results == []
    assert str(tmp_path / "elsewhere") in message and "same path on every node" in message


def test_the_cluster_benchmark_runs_and_reports_a_table():
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_cluster.py"), "--workers", "1",
         "--jobs", "1", "--iterations", "20"], capture_output=True, text=True, timeout=WAIT_S * 2,
        check=True).stdout
    assert re.search(r"^\| local executor \| 1 \| [\d.]+ \| [\d,]+ \| [\d.]+ \|$", out, re.M), out
    assert re.search(r"^\| Ray \| 1 \| [\d.]+ \| [\d,]+ \| [\d.]+ \|$", out, re.M), out


def test_two_jobs_run_at_once_with_progress_cancel_and_fetch(gateway, connect, tmp_path):
    server = gateway()
    client = connect(server)
    ping = client.ping()
    assert (ping["engine"], ping["device"]) == ("Ray cluster: 3 nodes, 0 GPUs, 2 CPUs", "cpu")
    images = target_images()
    for job in ("first", "second"):
        assert client.submit(job, SPEC, {"images": images})["state"] == "queued"
    until(lambda: all(iteration(client, job) > 0 for job in ("first", "second")),
          "both jobs to report progress at once")
    assert actor_node(server, "first") != actor_node(server, "second")
    assert client.cancel("second")["state"] in ("cancelling", "cancelled")

    events = []
    final = client.wait("first", on_event=events.append)
    assert final["kind"] == "done", final.fields
    progress = [e["iteration"] for e in events if e["kind"] == "progress"]
    assert progress[-1] == SPEC["iterations"] and progress == sorted(progress)
    assert any(e["kind"] == "preview" for e in events)
    assert client.wait("second")["kind"] == "cancelled"
    assert client.status("second")["results"] == []

    paths = client.fetch("first", tmp_path / "out")
    assert [p.name for p in paths] == ["texture.npy", "render.npy", "metrics.json",
                                      "manifest.json"]
    np.testing.assert_allclose(np.load(paths[0]), images.mean(0), atol=2e-3)
    assert until(lambda: client.ping()["queued"] == 0, "an empty queue") is True


def test_a_restarted_gateway_reattaches_to_the_running_job(gateway, connect):
    server = gateway()
    client = connect(server)
    # the job cancelled while the gateway is down runs long: on a loaded machine the gateway's
    # restart outlasted SPEC's 1.5-3 s, and the job ended done before its cancel was read
    for job, spec in (("long", SPEC), ("dropped", LONG_SPEC)):
        client.submit(job, spec, {"images": target_images()})
    until(lambda: iteration(client, "long") > SPEC["checkpoint_every"], "a checkpoint")
    until(lambda: iteration(client, "dropped") > 0, "the other job to run")
    node = actor_node(server, "long")

    server.kill()  # the gateway goes; the jobs run on
    client.close()
    state = server.job_dir("dropped") / "state.json"  # cancelled as the gateway went
    state.write_text(json.dumps({**json.loads(state.read_text()), "stop": "cancel"}))
    server.start()
    again = connect(server)
    events = []
    final = again.wait("long", on_event=events.append)
    assert final["kind"] == "done", final.fields
    assert not [e for e in events if "resumed_from" in e]  # the same actor went on
    assert again.status("long")["progress"]["iteration"] == SPEC["iterations"]
    assert node in {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert again.status("dropped")["state"] == "cancelled"
    until(lambda: not alive(server, "dropped"), "its actor to be killed, not left holding "
                                                "its CPU", timeout=10)


def test_a_job_on_a_lost_node_resumes_elsewhere_byte_identical(cluster, gateway, connect):
    server = gateway()
    client = connect(server)
    images = target_images(seed=5)
    for job in ("reference", "interrupted"):
        client.submit(job, LONG_SPEC, {"images": images})
    until(lambda: iteration(client, "interrupted") > SPEC["checkpoint_every"], "a checkpoint")
    lost = actor_node(server, "interrupted")
    victim = next(node for node in cluster.worker_nodes if node.node_id == lost)
    cluster.remove_node(victim, allow_graceful=False)
    cluster.add_node(num_cpus=1)  # a node joins, as the module's cluster was
    events = []
    final = client.wait("interrupted", on_event=events.append)
    assert final["kind"] == "done", final.fields
    assert client.wait("reference")["kind"] == "done"
    resumed = [e["resumed_from"] for e in events if e["kind"] == "log" and "resumed_from" in e]
    assert resumed, "the job ended without being resumed: its node was lost too late"
    assert resumed[0] >= SPEC["checkpoint_every"]
    assert client.status("interrupted")["attempts"] == 2

    reference = {f["name"]: f for f in client.status("reference")["results"]}
    interrupted = {f["name"]: f for f in client.status("interrupted")["results"]}
    assert interrupted == reference
    for name in ("texture.npy", "render.npy"):
        assert (server.job_dir("interrupted") / "results" / name).read_bytes() == \
            (server.job_dir("reference") / "results" / name).read_bytes()



def test_a_job_actor_asks_for_one_gpu_or_cpu_per_rank():
    from diffrec.server.optimize_runner import OptimizeRunner

    def processes(runner, spec):
        return runner.processes(runner.parse(spec))

    def optimize(**settings):
        return {"task": "optimize", "settings": settings}

    assert processes(OptimizeRunner(), optimize(ranks=4)) == 4
    assert processes(OptimizeRunner(), optimize(ranks="2")) == 2  # the settings' coercion
    assert processes(OptimizeRunner(), optimize(mode="refine")) == 1
    assert processes(TextureFitRunner(), SPEC) == 1  # fit_texture has no ranks


@pytest.fixture
def no_ray(monkeypatch):
    """ray.init as Ray's when no cluster answers: (the addresses it was called with)."""
    from diffrec.server import cluster

    calls = []

    def init(address, **_):
        calls.append(address)
        raise ConnectionError("Could not find any running Ray instance. Please specify the one "
                              "to connect to by setting `--address` flag or `RAY_ADDRESS` "
                              "environment variable.")

    monkeypatch.setattr(cluster.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(cluster.ray, "init", init)
    return calls


def test_a_gateway_without_a_ray_cluster_says_to_start_ray(no_ray, tmp_path):
    from diffrec.server.cluster import RayExecutor

    with pytest.raises(UserError) as info:
        RayExecutor("auto", tmp_path, lambda *_: None)
    said = str(info.value)
    assert "cannot reach a Ray cluster at --cluster auto" in said and "ray start --head" in said
    assert "Could not find any running Ray instance" in said and no_ray == ["auto"]


def test_a_head_address_where_nothing_listens_is_refused_at_once(no_ray, tmp_path):
    """Before, Ray retried for minutes, printing warnings."""
    from diffrec.server.cluster import RayExecutor

    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(UserError) as info:
        RayExecutor(address, tmp_path, lambda *_: None)
    assert time.monotonic() - started < 10 and no_ray == []  # Ray was not asked
    said = str(info.value)
    assert f"cannot reach a Ray cluster at --cluster {address} (" in said, said
    assert "ray start --head" in said


@pytest.mark.parametrize("answer", [b"HTTP/1.0 400 Bad request\r\n\r\n", b""])
def test_a_head_address_where_something_else_listens_is_refused_at_once(no_ray, tmp_path,
                                                                         answer):
    """A web server, or a service that closes at once, on the port given: Ray retried for
    minutes, printing warnings."""
    from diffrec.server.cluster import RayExecutor

    listener = socket.create_server(("127.0.0.1", 0))

    def serve_one():
        peer, _ = listener.accept()
        with peer:
            peer.recv(64)
            peer.sendall(answer)

    threading.Thread(target=serve_one, daemon=True).start()
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    started = time.monotonic()
    with pytest.raises(UserError) as info, listener:
        RayExecutor(address, tmp_path, lambda *_: None)
    assert time.monotonic() - started < 10 and no_ray == []  # Ray was not asked
    assert f"--cluster {address} (something answers there, but it is no Ray head" in str(
        info.value)


def test_an_address_ray_cannot_read_is_a_sentence(monkeypatch, tmp_path):
    """`--cluster bogus` (a head's name without its port, say) ended in Ray's traceback."""
    from diffrec.server import cluster

    def init(address, **_):  # Ray's own words for such an address
        raise ValueError(f"Invalid address format: {address}")

    monkeypatch.setattr(cluster.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(cluster.ray, "init", init)
    with pytest.raises(UserError) as info:
        cluster.RayExecutor("bogus", tmp_path, lambda *_: None)
    said = str(info.value)
    assert said.startswith("--cluster bogus: Invalid address format: bogus; give auto"), said
