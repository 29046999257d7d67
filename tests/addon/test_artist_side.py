"""Issue 24, the artist's side, under bpy against real servers (checks_artist_side.py, see
artist_servers.py): the artist's world, objects, materials and images are never replaced nor
lost; every failure is one sentence, fast; Optimize is one undo step; Export NeRF Dataset is
in File > Export and renders one view per tick."""

import pytest
from artist_servers import artist_servers
from blender_run import assert_check, check_names

SCRIPT = "checks_artist_side.py"


@pytest.fixture(scope="module")
def servers(tmp_path_factory, result_folder):
    with pytest.MonkeyPatch.context() as monkeypatch, \
            artist_servers(tmp_path_factory.mktemp("artist-servers"),
                           result_folder / "result", monkeypatch) as endpoints:
        yield endpoints


@pytest.mark.blender
@pytest.mark.parametrize("name", check_names(SCRIPT))
def test_artist_side(name, servers, results_dir, tmp_path_factory, monkeypatch):
    for server, endpoint in servers.items():
        monkeypatch.setenv(f"DIFFREC_{server.upper()}", endpoint)
    monkeypatch.setenv("BLENDER_USER_RESOURCES", str(tmp_path_factory.mktemp("blender-user")))
    assert_check(SCRIPT, name, results_dir)
