"""``scripts/demo --out DIR`` never deletes a folder it did not create (issue 55.11): a
non-empty folder without the demo's marker is refused with a sentence, before anything is
touched; a folder the demo made (it holds the marker) is emptied and reused."""


import pytest

from diffrec_bench.demo import out_folder

pytestmark = pytest.mark.blender  # the demo's command imports bpy


class SceneBuilt(Exception):
    """Raised in place of building the scene: the demo got past preparing its folder."""


@pytest.fixture
def demo(monkeypatch):
    from diffrec_bench.demo import command as demo

    def stop(args):
        raise SceneBuilt

    monkeypatch.setattr(demo, "build_scene", stop)
    return demo


def test_a_folder_with_someone_elses_files_is_refused_and_kept(demo, tmp_path, capsys):
    documents = tmp_path / "Documents"
    (documents / "letters").mkdir(parents=True)
    (documents / "letters" / "thesis.txt").write_text("years of work")
    with pytest.raises(SystemExit) as refused:
        demo.main(["--out", str(documents), "--device", "cpu"])
    assert refused.value.code != 0
    message = str(refused.value.code) + capsys.readouterr().err
    assert str(documents) in message and "--out" in message and "empty" in message
    assert (documents / "letters" / "thesis.txt").read_text() == "years of work"
    assert not (documents / out_folder.MARKER).exists()


def test_a_new_folder_is_made_with_the_marker_and_reused_after(demo, tmp_path):
    out = tmp_path / "new" / "demo"
    with pytest.raises(SceneBuilt):
        demo.main(["--out", str(out), "--device", "cpu"])
    assert (out / out_folder.MARKER).is_file()
    (out / "asset").mkdir()
    (out / "asset" / "mesh.glb").write_bytes(b"an earlier run's result")
    with pytest.raises(SceneBuilt):
        demo.main(["--out", str(out), "--device", "cpu"])
    assert sorted(path.name for path in out.iterdir()) == [out_folder.MARKER]


def test_an_empty_folder_is_taken(tmp_path):
    out_folder.prepare(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == [out_folder.MARKER]


def test_a_file_in_place_of_the_folder_is_refused(tmp_path):
    path = tmp_path / "demo"
    path.write_text("not a folder")
    with pytest.raises(SystemExit, match="not a folder"):
        out_folder.prepare(path)
    assert path.read_text() == "not a folder"


def test_a_ctrl_c_ends_the_demo_with_a_sentence_and_status_130(demo, tmp_path, capsys,
                                                              monkeypatch):
    """It printed three tracebacks (the add-on's, Blender's and the demo's)."""
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "build_scene", interrupted)
    assert demo.main(["--out", str(tmp_path / "out")]) == 130
    assert capsys.readouterr().err == ("scripts/demo: interrupted (Ctrl-C); run it again to "
                                       "start over\n")
