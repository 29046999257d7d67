"""A done job's result files checked on the server's disk before they are served.

When a job ends, its ``results`` listing records each file's size and content hash, and its
``manifest.json`` (itself listed) each file's size and SHA-256. A file can still change
afterwards: a failing disk, a full disk that cut a copy short, someone editing the data
directory. ``ResultCheck.problems`` compares the files with both on every ``fetch`` (a file's
hashes are taken again only when its size, times or inode changed since they last matched)
and ``size_problem`` each file a ``read`` opens, so that a damaged result is a sentence naming
the file rather than bytes a client would refuse or an internal error.
"""

from __future__ import annotations

import os
from pathlib import Path

from diffrec.protocol.manifest import MANIFEST_NAME, ManifestError, mismatch, read_manifest
from diffrec.protocol.transfer import content_hash_file

Signature = tuple[tuple[str, int, int, int, int], ...]


def size_problem(name: str, stat: os.stat_result | None, listed_size: int) -> str | None:
    """Why the result file ``name`` (``stat``: its stat, None when it is missing) is not the
    ``listed_size`` bytes the job listed; None when it is."""
    if stat is None:
        return f"{name} is missing"
    if stat.st_size != listed_size:
        return f"{name} has {stat.st_size} bytes; the job listed {listed_size}"
    return None


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except FileNotFoundError:
        return None


class ResultCheck:
    """The fetch-time check of each job's results, remembering which were found whole."""

    def __init__(self):
        self._whole: dict[str, Signature] = {}

    def forget(self, job_id: str) -> None:
        self._whole.pop(job_id, None)

    def problems(self, job_id: str, results_dir: Path, listing: list[dict]) -> list[str]:
        """One sentence per result file in ``results_dir`` that is not as ``listing`` (the
        job's ``results``) and its manifest describe it; empty when every file is whole."""
        stats = {entry["name"]: _stat(results_dir / entry["name"]) for entry in listing}
        problems = [problem for entry in listing
                    if (problem := size_problem(entry["name"], stats[entry["name"]],
                                                entry["size"]))]
        if problems:
            self.forget(job_id)
            return problems
        signature = tuple((name, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)
                          for name, stat in stats.items())
        if self._whole.get(job_id) == signature:
            return []
        problems = self._hash_problems(results_dir, listing)
        if problems:
            self.forget(job_id)
        else:
            self._whole[job_id] = signature
        return problems

    @staticmethod
    def _hash_problems(results_dir: Path, listing: list[dict]) -> list[str]:
        """The files whose bytes changed: the manifest against its listed content hash, the
        files it describes against its SHA-256s, any other listed file against its content
        hash."""
        hashes = {entry["name"]: entry["content_hash"] for entry in listing}
        described = set()
        problems = []
        if MANIFEST_NAME in hashes:
            if content_hash_file(results_dir / MANIFEST_NAME) != hashes[MANIFEST_NAME]:
                return [f"{MANIFEST_NAME} was edited after the job ended (its content hash "
                        "no longer matches the one listed then)"]
            try:
                entries = read_manifest(results_dir)
            except ManifestError as error:
                return [str(error)]
            described = {entry.name for entry in entries}
            problems += [problem for entry in entries
                         if (problem := mismatch(results_dir / entry.name, entry))]
        problems += [f"{name} does not match the content hash the job listed (the file is "
                     "corrupted)" for name, expected in hashes.items()
                     if name != MANIFEST_NAME and name not in described
                     and content_hash_file(results_dir / name) != expected]
        return problems
