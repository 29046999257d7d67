"""The result manifest: ``manifest.json``, the table of contents of a finished result folder.

Every result (a ``diffrec optimize`` output folder, a server job's results) ends with
``manifest.json``, written **last** and atomically (a temporary file, then a rename): its presence
means every file it lists is complete. It holds::

    {"format": 1, "files": [{"name": "mesh.glb", "size": 123456, "sha256": "…", "role": "mesh"},
                            …]}

``name`` is a plain file name in the folder (``FILE_NAME_RE``), ``size`` its length in bytes,
``sha256`` the hex SHA-256 of its bytes (what ``sha256sum`` prints; not the transfer's block
content hash), ``role`` what it is for (``ROLES``). The manifest does not list itself.

Standard library only (plus this package), so the add-on uses it through the vendored protocol.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from .file_checks import FileCheckError, parse_json
from .schema import FILE_NAME_RE

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
ROLES = {
    "mesh": "the asset: mesh and PBR material with its textures (glTF binary, mesh.glb)",
    "light": "the environment light (probe.hdr, equirectangular, linear)",
    "metrics": "figures of the run (metrics.json)",
    "validation": "a held-out view: target | result | error (validation_view_NN.png)",
    "obj": "the asset again as OBJ + MTL + PNG textures (when asked for: export_obj)",
    "ktx2": "the asset for real-time engines: mesh_ktx2.glb, whose textures name the KTX2 "
            "files beside it (texture_*.ktx2, mip chains) through KHR_texture_basisu",
    "data": "a task's own arrays or files (e.g. fit_texture's texture.npy)",
}
SHA256_RE = re.compile(r"[0-9a-f]{64}\Z")
_READ_BYTES = 1 << 20


class ManifestError(ValueError):
    """A manifest that cannot be read, a selection it cannot satisfy, or a file that does not
    match it; the message says which file and how."""


@dataclass(frozen=True)
class Entry:
    """One listed file: ``name``, ``size`` (bytes), ``sha256`` (hex), ``role`` (``ROLES``)."""

    name: str
    size: int
    sha256: str
    role: str


def sha256_file(path: str | Path) -> str:
    """The hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while block := stream.read(_READ_BYTES):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: str | Path, roles: Mapping[str, str]) -> Path:
    """Describe the files ``roles`` names (file name -> role, in that order) in ``folder``, as
    they are now, in ``folder/manifest.json``; written atomically, so call it after every listed
    file is complete. Raises ManifestError for a bad name or role or a missing file."""
    folder = Path(folder)
    entries = []
    for name, role in roles.items():
        _check_name_role(name, role)
        path = folder / name
        if not path.is_file():
            raise ManifestError(f"{name} is listed but not in {folder}")
        entries.append(asdict(Entry(name, path.stat().st_size, sha256_file(path), role)))
    target = folder / MANIFEST_NAME
    partial = folder / f".{MANIFEST_NAME}.tmp"
    partial.write_text(json.dumps({"format": FORMAT_VERSION, "files": entries}, indent=1))
    os.replace(partial, target)
    return target


def parse_manifest(text: str | bytes) -> list[Entry]:
    """The entries of a manifest's JSON text, each checked; ManifestError if it is not one."""
    try:
        document = parse_json(text, MANIFEST_NAME)
    except FileCheckError as exc:
        raise ManifestError(str(exc)) from None
    if not isinstance(document, dict) or document.get("format") != FORMAT_VERSION:
        found = document.get("format") if isinstance(document, dict) else None
        raise ManifestError(f"{MANIFEST_NAME} has format {found!r}; this version reads format "
                            f"{FORMAT_VERSION}")
    files = document.get("files")
    if not isinstance(files, list):
        raise ManifestError(f"{MANIFEST_NAME} has no list of files")
    entries, seen = [], set()
    for item in files:
        try:
            entry = Entry(**item)
        except TypeError:
            raise ManifestError(f"{MANIFEST_NAME} has a malformed entry {item!r}") from None
        _check_name_role(entry.name, entry.role)
        if (isinstance(entry.size, bool) or not isinstance(entry.size, int) or entry.size < 0
                or not isinstance(entry.sha256, str) or not SHA256_RE.match(entry.sha256)
                or entry.name in seen):
            raise ManifestError(f"{MANIFEST_NAME} has a malformed entry {item!r}")
        seen.add(entry.name)
        entries.append(entry)
    return entries


def read_manifest(folder: str | Path) -> list[Entry]:
    """The entries of ``folder/manifest.json``; ManifestError if it is missing or malformed."""
    path = Path(folder) / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(f"{path} is missing: the result is incomplete (it is written last)")
    return parse_manifest(path.read_bytes())


def earlier_entries(folder: str | Path) -> list[Entry]:
    """The entries of a manifest already in ``folder`` (an earlier result written or fetched
    there), or none where there is none or it cannot be read."""
    try:
        return read_manifest(folder)
    except (ManifestError, OSError):
        return []


def remove_stale(folder: str | Path, earlier: Iterable[Entry], kept: Iterable[str]
                 ) -> list[str]:
    """Remove from ``folder`` the files of an earlier result (``earlier``, its manifest's
    entries) that are not among ``kept`` (the file names the new result writes or keeps
    there), so that none of them passes for part of it; returns the names removed."""
    kept = set(kept)
    removed = []
    for entry in earlier:
        path = Path(folder) / entry.name
        if entry.name not in kept and path.is_file():
            path.unlink()
            removed.append(entry.name)
    return removed


def select(entries: Iterable[Entry], only: Iterable[str] | None = None) -> list[Entry]:
    """The entries named by ``only`` (file names or roles, mixed; one string is one word), in
    manifest order; all of them when ``only`` is None. ManifestError for a word that is
    neither a listed name nor a role."""
    entries = list(entries)
    if only is None:
        return entries
    wanted = {only} if isinstance(only, str) else set(only)
    unknown = wanted - {entry.name for entry in entries} - set(ROLES)
    if unknown:
        raise ManifestError(f"the result has no file or role {', '.join(sorted(unknown))}; it "
                            f"holds {', '.join(entry.name for entry in entries)}")
    return [entry for entry in entries if entry.name in wanted or entry.role in wanted]


def mismatch(path: str | Path, entry: Entry) -> str | None:
    """Why the file at ``path`` is not the one ``entry`` describes (missing, size, sha256), or
    None when it is."""
    path = Path(path)
    if not path.is_file():
        return f"{entry.name} is missing"
    size = path.stat().st_size
    if size != entry.size:
        return f"{entry.name} has {size} bytes; the manifest says {entry.size}"
    if sha256_file(path) != entry.sha256:
        return f"{entry.name} does not match the manifest's sha256 (the file is corrupted)"
    return None


def verify(folder: str | Path, entries: Iterable[Entry]) -> None:
    """Check each of ``entries`` against its file in ``folder``; ManifestError listing every
    mismatch."""
    problems = [problem for entry in entries
                if (problem := mismatch(Path(folder) / entry.name, entry))]
    if problems:
        raise ManifestError("; ".join(problems))


def _check_name_role(name, role) -> None:
    if not isinstance(name, str) or not FILE_NAME_RE.match(name) or name == MANIFEST_NAME:
        raise ManifestError(f"{name!r} is not a result file name")
    if role not in ROLES:
        raise ManifestError(f"{name}: unknown role {role!r} (one of {', '.join(ROLES)})")
