"""The client's side of uploads and downloads over a ``channel.Channel``: blobs sent in
windows of chunks, results read in windows of chunks into resumable files, each verified by
its content hash; both continue from the byte offset the receiver holds after any
interruption (``Lost``: the channel reconnects and the transfer resumes). Fetches into one
folder take turns (``folder_lock``), so that two followers of one job never write one file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from pathlib import Path

import numpy as np

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt

from .channel import Channel, Lost
from .errors import ProtocolError, ServerError
from .limits import CHUNK_BYTES, WINDOW_CHUNKS
from .manifest import (
    MANIFEST_NAME,
    ManifestError,
    earlier_entries,
    mismatch,
    parse_manifest,
    remove_stale,
    select,
)
from .schema import CONTENT_HASH_RE, FILE_NAME_RE
from .transfer import ResumableFile, chunk_ranges, content_hash, content_hash_file

Progress = Callable[[int, int], None]
"""on_progress(done, total): bytes."""
FETCH_LOCK = ".fetch.lock"
"""Where there is no ``flock``: the file in a results folder whose lock a fetch into that
folder holds."""


def _as_bytes(data) -> np.ndarray:
    """A flat uint8 view of a bytes-like object or a C-contiguous little-endian array."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data)
        if data.dtype.byteorder == ">":
            data = data.astype(data.dtype.newbyteorder("<"))
        return data.reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


def upload_inputs(channel: Channel, arrays: Mapping[str, np.ndarray],
                  on_progress: Progress | None) -> tuple[dict, dict]:
    """A submit's (inline arrays, blob inputs): arrays up to CHUNK_BYTES go inline, larger
    ones are uploaded as blobs first (``on_progress(done, total)``: bytes of all the uploads
    together, so the fraction only grows)."""
    inline, inputs = {}, {}
    arrays = {name: np.asarray(array) for name, array in arrays.items()}
    total = sum(array.nbytes for array in arrays.values() if array.nbytes > CHUNK_BYTES)
    before = 0  # bytes of the arrays already uploaded
    for name, array in arrays.items():
        if array.nbytes <= CHUNK_BYTES:
            inline[name] = array
            continue
        overall = None if on_progress is None else partial(
            lambda start, done, _size: on_progress(start + done, total), before)
        blob = upload(channel, array, on_progress=overall)
        before += array.nbytes
        inputs[name] = {"blob": blob, "dtype": array.dtype.name, "shape": list(array.shape)}
    return inline, inputs


def upload(channel: Channel, data, blob: str | None = None,
           on_progress: Progress | None = None) -> str:
    """``Client.upload``: ``data`` stored on the server as the blob ``blob`` (its content
    hash unless given); that name."""
    view = _as_bytes(data)
    blob = blob or content_hash(view)

    def attempt():
        reply = channel.call("upload", {"blob": blob, "size": view.nbytes})
        if not reply["complete"]:
            _send_chunks(channel, view, blob, reply["offset"], on_progress)
        return blob

    return channel.retrying(attempt)


def _send_chunks(channel: Channel, view: np.ndarray, blob: str, offset: int, on_progress) -> None:
    ranges = chunk_ranges(view.nbytes, offset)
    in_flight: set[int] = set()
    fields = {"blob": blob, "size": view.nbytes}
    while True:
        while len(in_flight) < WINDOW_CHUNKS and (span := next(ranges, None)):
            start, end = span
            chunk = {"data": view[start:end]}
            in_flight.add(channel.send("chunk", {**fields, "offset": start}, chunk))
        try:
            ack = channel.answer(in_flight, channel.timeout)
        except ServerError as exc:
            if exc.code == "offset_mismatch":
                raise Lost from None  # start again from the server's offset
            raise
        in_flight.discard(ack["re"])
        if on_progress:
            on_progress(ack["offset"], view.nbytes)
        if ack["complete"]:
            return


def fetch(channel: Channel, job: str, directory: Path, on_progress: Progress | None,
          only: Iterable[str] | None) -> list[Path]:
    """``Client.fetch``: ``job``'s manifest, then the files ``only`` selects from it, into
    ``directory``, each verified; their paths in manifest order, then the manifest's."""
    listing = {}
    for entry in channel.call("fetch", {"job": job})["files"]:
        name = entry["name"]
        if not (isinstance(name, str) and FILE_NAME_RE.match(name)
                and CONTENT_HASH_RE.match(entry["content_hash"])):
            raise ProtocolError("bad_message", f"the server listed a bad result file {name!r}")
        listing[name] = entry
    if MANIFEST_NAME not in listing:
        raise ManifestError(f"the results of job {job!r} have no {MANIFEST_NAME}")
    data = _read_small(channel, job, listing[MANIFEST_NAME])
    entries = parse_manifest(data)
    chosen = select(entries, only)  # a wrong ``only`` writes nothing
    directory.mkdir(parents=True, exist_ok=True)  # only once the selection is known
    problems = []
    with folder_lock(directory):  # another fetch into it waits, then finds the files held
        earlier = earlier_entries(directory)
        manifest = _publish(directory / MANIFEST_NAME, data)
        for entry in chosen:
            if entry.name not in listing:
                problems.append(f"{entry.name} is in the manifest but not among the results")
                continue
            path = _download(channel, job, directory, listing[entry.name], on_progress)
            if problem := mismatch(path, entry):
                path.unlink()
                problems.append(problem)
        # no earlier result's file passes for one of this job's: kept where fetched now, or
        # listed alike by both manifests (a part of this result fetched before)
        alike = {(entry.name, entry.sha256) for entry in entries}
        remove_stale(directory, earlier,
                     [*(entry.name for entry in chosen),
                      *(entry.name for entry in earlier if (entry.name, entry.sha256) in alike)])
    if problems:
        raise ManifestError(f"job {job!r}: " + "; ".join(problems))
    return [directory / entry.name for entry in chosen] + [manifest]


@contextlib.contextmanager
def folder_lock(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``directory`` for the block: fetches into one folder, from
    threads of one process or from several processes, take turns. The folder itself is locked
    (``flock``), so nothing is added to it; where there is no ``flock`` (Windows), a
    FETCH_LOCK file in it is."""
    if fcntl is not None:
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)  # closing releases the lock
        return
    with open(Path(directory) / FETCH_LOCK, "a+b") as handle:
        handle.seek(0)
        while True:
            try:  # LK_LOCK tries for 10 s, then raises: a long fetch is waited for
                msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK, 1)
                break
            except OSError:
                continue
        try:
            yield
        finally:
            handle.seek(0)
            msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)


def _download(channel: Channel, job: str, directory: Path, entry: Mapping, on_progress) -> Path:
    """One listed result file into ``directory``, unless a copy with its content hash is
    there already; verified by that hash."""
    path, size, expected = directory / entry["name"], entry["size"], entry["content_hash"]
    held = path.exists() and path.stat().st_size == size
    if not (held and content_hash_file(path) == expected):
        target = ResumableFile(path, size, expected)
        try:
            channel.retrying(partial(_read_into, channel, job, entry["name"], target, on_progress))
            target.finish()
        finally:
            target.close()
    return path


class _InMemory:
    """The target ``_read_into`` fills, held in memory: ``size`` bytes from offset 0."""

    def __init__(self, size: int):
        self.size, self.offset, self._parts = size, 0, []

    @property
    def complete(self) -> bool:
        return self.offset == self.size

    def write(self, offset: int, data) -> None:
        self._parts.append(bytes(data))
        self.offset += len(self._parts[-1])

    def data(self) -> bytes:
        return b"".join(self._parts)


def _read_small(channel: Channel, job: str, entry: Mapping) -> bytes:
    """One listed result file's bytes (a small one: the manifest), verified by its content
    hash; nothing is written."""
    def attempt():
        target = _InMemory(entry["size"])
        _read_into(channel, job, entry["name"], target, None)
        return target.data()

    data = channel.retrying(attempt)
    if content_hash(data) != entry["content_hash"]:
        raise ProtocolError("hash_mismatch", f"{entry['name']}: the received bytes do not "
                                             "match its content hash; they were discarded")
    return data


def _publish(path: Path, data: bytes) -> Path:
    """``data`` written to ``path`` whole (through ``path.part``), unless it holds them."""
    if not (path.is_file() and path.read_bytes() == data):
        part = path.with_name(path.name + ".part")
        part.write_bytes(data)
        os.replace(part, path)
    return path


def _read_into(channel: Channel, job: str, name: str, target: ResumableFile, on_progress) -> None:
    ranges = chunk_ranges(target.size, target.offset)
    in_flight: dict[int, int] = {}
    while not target.complete:
        while len(in_flight) < WINDOW_CHUNKS and (span := next(ranges, None)):
            start, end = span
            fields = {"job": job, "file": name, "offset": start, "length": end - start}
            in_flight[channel.send("read", fields)] = start
        data = channel.answer(in_flight, channel.timeout)
        if in_flight.pop(data["re"]) != target.offset or data["offset"] != target.offset:
            raise Lost  # out of order: ask again from where the file stands
        target.write(data["offset"], data.arrays["data"])
        if on_progress:
            on_progress(target.offset, target.size)
