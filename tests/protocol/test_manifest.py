"""``diffrec.protocol.manifest`` on its own: what it refuses to read and how it selects."""

import json

import pytest

from diffrec.protocol.manifest import (
    Entry,
    ManifestError,
    parse_manifest,
    select,
    write_manifest,
)

SHA = "0" * 64


def manifest(*files, version=1) -> str:
    return json.dumps({"format": version, "files": list(files)})


def entry(name="mesh.glb", size=3, sha256=SHA, role="mesh") -> dict:
    return {"name": name, "size": size, "sha256": sha256, "role": role}


@pytest.mark.parametrize("text, message", [
    ("not json", "not valid JSON"),
    (manifest(version=2), "format 2"),
    (json.dumps([]), "format None"),
    (json.dumps({"format": 1}), "no list of files"),
    (manifest({"name": "mesh.glb"}), "malformed entry"),
    (manifest(entry(name="../mesh.glb")), "not a result file name"),
    (manifest(entry(name="manifest.json")), "not a result file name"),
    (manifest(entry(role="texture")), "unknown role 'texture'"),
    (manifest(entry(size=-1)), "malformed entry"),
    (manifest(entry(size=True)), "malformed entry"),
    (manifest(entry(sha256="ABC")), "malformed entry"),
    (manifest(entry(), entry()), "malformed entry"),  # listed twice
])
def test_a_malformed_manifest_is_refused(text, message):
    with pytest.raises(ManifestError, match=message):
        parse_manifest(text)


def test_select_by_names_and_roles_in_manifest_order():
    entries = parse_manifest(manifest(entry("a.png", role="validation"), entry(),
                                      entry("probe.hdr", role="light"),
                                      entry("b.png", role="validation")))
    assert select(entries) == entries
    assert [e.name for e in select(entries, ["validation", "mesh.glb"])] == [
        "a.png", "mesh.glb", "b.png"]
    assert [e.name for e in select(entries, "light")] == ["probe.hdr"]
    assert select(entries, ["obj"]) == []  # a role the result does not have
    with pytest.raises(ManifestError, match=r"no file or role mesh\.obj"):
        select(entries, ["mesh.obj", "light"])


def test_write_manifest_refuses_what_it_cannot_describe(tmp_path):
    (tmp_path / "mesh.glb").write_bytes(b"abc")
    with pytest.raises(ManifestError, match="listed but not in"):
        write_manifest(tmp_path, {"probe.hdr": "light"})
    with pytest.raises(ManifestError, match="unknown role"):
        write_manifest(tmp_path, {"mesh.glb": "asset"})
    assert not (tmp_path / "manifest.json").exists()
    write_manifest(tmp_path, {"mesh.glb": "mesh"})
    (read,) = parse_manifest((tmp_path / "manifest.json").read_text())
    assert read == Entry("mesh.glb", 3, read.sha256, "mesh") and len(read.sha256) == 64
