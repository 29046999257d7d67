"""A received file whose bytes do not match their content hash is refused naming the file
(issue 55.8: ``hash_mismatch`` said only that some bytes did not match), and discarded."""

import pytest

from diffrec.protocol.errors import ProtocolError
from diffrec.protocol.transfer import ResumableFile, content_hash_file


def test_a_hash_mismatch_names_the_file_and_keeps_nothing(tmp_path):
    (tmp_path / "source").write_bytes(b"the real mesh")
    expected = content_hash_file(tmp_path / "source")
    target = ResumableFile(tmp_path / "mesh.glb", 13, expected)
    target.write(0, b"the real mesx")
    with pytest.raises(ProtocolError) as refused:
        target.finish()
    assert refused.value.code == "hash_mismatch" and "mesh.glb" in refused.value.message
    assert sorted(path.name for path in tmp_path.iterdir()) == ["source"]
    whole = ResumableFile(tmp_path / "mesh.glb", 13, expected)
    whole.write(0, b"the real mesh")
    assert whole.finish().read_bytes() == b"the real mesh"
