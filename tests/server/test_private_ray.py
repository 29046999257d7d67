"""``diffrec serve --cluster local``: the gateway runs its jobs on a Ray of its own, closed to
everyone else (``diffrec.server.private_ray``): every socket its processes listen on is on
loopback, no token file readable by others, no world-writable session folder, and all of it
gone when the gateway stops (one Ray start: tens of seconds on a small machine); and a token
file of a cluster started by the operator made readable by its owner alone."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import stat
import time
from pathlib import Path

import pytest
from helpers.servers import fit_spec, target_images

pytest.importorskip("ray")
pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(),
                                reason="reads the listening sockets from Linux's /proc")


def process_tree(root: int) -> set[int]:
    """``root`` and every process descended from it (from the parent ids in /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):  # ended meanwhile
                continue
            children.setdefault(parent, []).append(int(entry.name))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += children.get(pid, [])
    return tree


def listening_sockets() -> dict[int, tuple[str, int]]:
    """{socket inode: (host, port)} of every listening TCP socket of this machine."""
    found = {}
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            host, port = fields[1].split(":")
            raw = bytes.fromhex(host)  # 32-bit words in the machine's (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found[int(fields[9])] = (socket.inet_ntop(family, raw), int(port, 16))
    return found


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets ``pid`` holds open."""
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            match = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(fd))
            if match:
                inodes.add(int(match[1]))
    except OSError:  # ended meanwhile
        pass
    return inodes


def loopback(host: str) -> bool:
    address = ipaddress.ip_address(host)
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 on a dual-stack socket
    return address.is_loopback or bool(mapped and mapped.is_loopback)


def command_line(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:
        return []


def test_a_token_file_readable_by_others_becomes_its_owners_alone(tmp_path, monkeypatch):
    from diffrec.server.private_ray import tighten_token_file

    named, default = tmp_path / "token", tmp_path / ".ray" / "auth_token"
    default.parent.mkdir()
    for path, mode in ((named, 0o644), (default, 0o640)):
        path.write_text("secret")
        path.chmod(mode)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(named))
    tighten_token_file()
    assert stat.S_IMODE(named.stat().st_mode) == 0o600  # the file Ray is told to read
    assert stat.S_IMODE(default.stat().st_mode) == 0o640
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH")
    tighten_token_file()
    assert stat.S_IMODE(default.stat().st_mode) == 0o600  # else ~/.ray/auth_token
    default.unlink()
    tighten_token_file()  # none: nothing to do


@pytest.mark.slow
def test_a_gateway_runs_jobs_on_a_ray_of_its_own_closed_to_others(start_server, connect,
                                                                   tmp_path, monkeypatch):
    home = tmp_path / "home"  # where Ray would write its token file, ~/.ray/auth_token
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    server = start_server("--cluster", "local")
    client = connect(server)
    assert client.ping()["engine"].startswith("Ray cluster: 1 nodes")
    client.submit("own", fit_spec(), {"images": target_images()})
    assert client.wait("own")["kind"] == "done"  # a job actor's worker among the processes
    client.close()

    tree = process_tree(server.process.pid)
    sockets = listening_sockets()
    listeners = {(pid, sockets[inode]) for pid in tree for inode in socket_inodes(pid)
                 if inode in sockets}
    assert len({pid for pid, _ in listeners}) >= 3  # the gateway, Ray's GCS and raylet...
    exposed = [(" ".join(command_line(pid))[:60], where) for pid, where in listeners
               if not loopback(where[0])]
    assert exposed == []

    token = home / ".ray" / "auth_token"
    assert not token.exists() or stat.S_IMODE(token.stat().st_mode) == 0o600

    sessions = {argument.split("=", 1)[1] for pid in tree for argument in command_line(pid)
                if re.match(r"--session[-_]dir=", argument)}
    assert len(sessions) == 1
    session = Path(sessions.pop())
    ray_temp = session.parent  # Ray's temporary folder, the sessions' parent
    folders = [ray_temp, *(Path(root) / name for root, names, _ in os.walk(ray_temp)
                           for name in names)]
    assert len(folders) > 3  # sockets, logs, runtime_resources...
    writable = [folder for folder in folders if folder.stat().st_mode & stat.S_IWOTH]
    assert writable == []

    server.process.terminate()
    assert server.process.wait(30) == 0
    deadline = time.monotonic() + 15
    while any(Path(f"/proc/{pid}").exists() for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(Path(f"/proc/{pid}").exists() for pid in tree)  # Ray stopped with it
    assert not session.exists()
    assert "Started a local Ray instance" in server.log.read_text()


def ray_folder(server) -> Path:
    """The private folder of a gateway's own Ray, as its log names it."""
    return Path(re.search(r"its session folders in (\S+)", server.log.read_text())[1])


@pytest.mark.slow
def test_what_a_killed_gateways_ray_left_is_ended_by_the_next_start(start_server, tmp_path):
    killed = start_server("--cluster", "local", data_dir=tmp_path / "killed")
    tree = process_tree(killed.process.pid) - {killed.process.pid}
    folder = ray_folder(killed)
    killed.kill()
    time.sleep(2)
    left = {pid for pid in tree if Path(f"/proc/{pid}").exists()}
    assert left and folder.is_dir()  # Ray's agents outlive a gateway killed with SIGKILL

    second = start_server("--cluster", "local", data_dir=tmp_path / "second")
    assert not any(Path(f"/proc/{pid}").exists() for pid in left)
    assert not folder.exists()
    assert "left by a gateway killed earlier" in second.log.read_text()
    own = ray_folder(second)
    second.stop()
    assert second.process.returncode == 0
    assert not own.exists()
