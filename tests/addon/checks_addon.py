"""Add-on checks under bpy: registration, setup validation, previews, NeRF export and import
(see harness.py; the import of a result is in checks_import.py)."""

import math
import struct
import sys
import tempfile
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: I001  (puts the repository on sys.path)
import bpy
import numpy as np

import addon
from addon import export_scene, panel, validate

OPERATORS = (
    "optimize", "attach", "cancel", "test_connection", "generate_keys", "copy_public_key",
    "import_nerf", "export_nerf", "switch_world",
)


def check_register_and_unregister_cleanly():
    addon.register()
    try:
        for name in OPERATORS:
            assert hasattr(bpy.types, f"DIFFREC_OT_{name}"), name
        assert hasattr(bpy.types, "DIFFREC_PT_main") and hasattr(bpy.types, "DIFFREC_PT_jobs")
        assert bpy.context.scene.diffrec.mode == "materials"
    finally:
        addon.unregister()
    leftovers = [name for name in dir(bpy.types) if name.upper().startswith("DIFFREC")]
    assert not leftovers, leftovers
    assert not hasattr(bpy.types.Scene, "diffrec")
    addon.register()  # and again: nothing was left half-registered
    addon.unregister()


def check_registered_without_being_enabled_the_preferences_read_their_defaults():
    """Tests and development register the add-on directly (no preferences of its own): each
    setting then reads as its declared default, and the learned world's import can ask."""
    from addon import preferences

    addon.register()
    try:
        assert preferences.preferences() is None
        assert preferences.setting("python") == "python3"
        assert preferences.setting("endpoint") == "" and preferences.setting("timeout") > 0
        assert preferences.setting("use_learned_world") in (True, False)
    finally:
        addon.unregister()


def check_presets_are_the_backends():
    """Each preset fills the panel with the backend's own values, read here through the
    backend package (``diffrec.protocol.settings``), not the add-on's wire; the panel's
    defaults are those of its default preset; the mode changes the preset's pass length."""
    from diffrec.protocol.settings import PRESETS, preset_values

    addon.register()
    try:
        settings = bpy.context.scene.diffrec

        def panel():
            return {"iterations": settings.iterations, "train_res": settings.train_resolution,
                    "texture_res": int(settings.texture_resolution)}

        def backend(preset):
            return {key: preset_values(preset.lower(), settings.mode)[key] for key in panel()}

        assert panel() == backend(settings.preset), (settings.preset, panel())
        presets = [item.identifier for item in settings.bl_rna.properties["preset"].enum_items
                   if item.identifier != "CUSTOM"]
        assert sorted(preset.lower() for preset in presets) == sorted(PRESETS), presets
        for preset in presets:
            settings.preset = "CUSTOM"
            settings.iterations, settings.train_resolution = 7, 17
            settings.texture_resolution = "4096"
            settings.preset = preset
            assert panel() == backend(preset), (preset, panel(), backend(preset))
            for mode in ("reconstruct", "materials"):
                settings.mode = mode
                assert panel() == backend(preset), (preset, mode, panel(), backend(preset))
        assert not settings.status, settings.status
    finally:
        addon.unregister()


def check_menus_and_defaults_are_the_backends():
    """The registered properties' preset and mode menus and their defaults are those of the
    backend's settings (read here through the backend package, not the add-on's wire)."""
    from diffrec.protocol.settings import MODES, PRESET_NOTES, PRESETS, RENDERERS, Settings

    addon.register()
    try:
        props = bpy.context.scene.diffrec.bl_rna.properties
        presets = [(item.identifier, item.description) for item in props["preset"].enum_items]
        assert presets == [*((name.upper(), PRESET_NOTES[name]) for name in PRESETS),
                           ("CUSTOM", "Your own settings")], presets
        assert [item.identifier for item in props["mode"].enum_items] == list(MODES)
        defaults = Settings()
        size = defaults.size
        assert props["preset"].default == defaults.run.preset.upper()
        assert props["mode"].default == defaults.run.mode
        assert props["texture_resolution"].default == str(size.texture_res)
        assert [item.identifier for item in props["shading"].enum_items] == list(RENDERERS)
        assert props["shading"].default == defaults.path_tracing.renderer
        assert {name: props[name].default for name in ("iterations", "batch", "train_resolution",
                                                       "light_resolution", "grid", "gpus")} == {
            "iterations": size.iterations, "batch": size.batch, "train_resolution": size.train_res,
            "light_resolution": size.light_res, "grid": size.grid, "gpus": defaults.limits.ranks}
        sizes = {item.identifier for item in props["texture_resolution"].enum_items}
        assert {str(values["texture_res"]) for values in PRESETS.values()} <= sizes
    finally:
        addon.unregister()


def check_the_guides_panel_section_says_what_the_panel_offers():
    """docs/guide.md, section 4: the Light choices the panel offers (Auto the default), and
    what a Baked Copy bakes, in the words the Start From tooltip uses."""
    guide = (Path(__file__).parents[2] / "docs" / "guide.md").read_text()
    panel_section = " ".join(guide[guide.index("## 4. The panel"):guide.index("## 5. ")].split())
    addon.register()
    try:
        props = bpy.context.scene.diffrec.bl_rna.properties
        light = [item.name for item in props["light"].enum_items]
        assert light == ["Auto", "Learn", "Keep HDRI"] and props["light"].default == "AUTO"
        assert ("**Light**: *Auto* (the default: the world's light kept where the targets are "
                "renders lit by it alone, else learned), *Learn* or *Keep HDRI*") in panel_section
        baked = props["start_from"].enum_items["BAKED"].description
        channels = "base colour, roughness, metallic, clear coat and normals"
        assert f"its {channels} baked" in baked, baked
        assert f"and its {channels} baked onto it by Cycles" in panel_section
    finally:
        addon.unregister()


# -- setup validation: one check per bad setup -----------------------------------------------


def _good_scene():
    """A cube seen by one camera, a lit world, the add-on registered."""
    addon.register()
    scene = bpy.context.scene
    bpy.ops.mesh.primitive_cube_add(size=1.0)
    cube = bpy.context.active_object
    camera = bpy.data.objects.new("camera", bpy.data.cameras.new("camera"))
    scene.collection.objects.link(camera)
    camera.location, camera.rotation_euler = (0.0, -5.0, 0.0), (math.radians(90), 0.0, 0.0)
    world = bpy.data.worlds.new("world")
    world.use_nodes = True
    scene.world = world
    bpy.context.view_layer.update()
    return scene, cube, camera


def _problems():
    return validate.problems(bpy.context, bpy.context.scene.diffrec)


def _expect(message_part: str):
    problems = _problems()
    addon.unregister()
    assert any(message_part in problem for problem in problems), problems


def check_good_setup_has_no_problems():
    _good_scene()
    problems = _problems()
    addon.unregister()
    assert problems == [], problems


def check_nothing_selected():
    _scene, cube, _camera = _good_scene()
    cube.select_set(False)
    _expect(validate.NOTHING_SELECTED)


def check_not_a_mesh():
    _scene, cube, camera = _good_scene()
    cube.select_set(False)
    camera.select_set(True)
    bpy.context.view_layer.objects.active = camera
    _expect("is a camera, not a mesh")


def check_no_cameras():
    _scene, _cube, camera = _good_scene()
    bpy.data.objects.remove(camera)
    _expect(validate.NO_CAMERAS)


def check_camera_that_does_not_see_the_object():
    _scene, _cube, camera = _good_scene()
    camera.rotation_euler = (math.radians(90), 0.0, math.radians(180))  # looks away
    bpy.context.view_layer.update()
    _expect("Camera 'camera' does not see 'Cube'")


def check_a_camera_away_from_reconstructs_cube_with_nothing_selected():
    """Reconstruct with nothing selected rendered and sent every view, and the server then
    refused the job for a camera that looked away from its cube."""
    scene, cube, camera = _good_scene()
    scene.diffrec.mode = "reconstruct"
    cube.select_set(False)
    bpy.context.view_layer.objects.active = None
    assert _problems() == [], _problems()
    camera.rotation_euler = (math.radians(90), 0.0, math.radians(180))  # looks away
    bpy.context.view_layer.update()
    _expect("Camera 'camera' does not see the cube of side 2.1 about (0, 0, 0) that "
            "Reconstruct finds the surface in: aim it at the object or leave it out.")


def check_camera_beside_the_object():
    _scene, _cube, camera = _good_scene()
    camera.location = (6.0, -5.0, 0.0)  # the cube is outside its field of view, in front
    bpy.context.view_layer.update()
    _expect("does not see")


def check_no_world_light():
    scene, _cube, _camera = _good_scene()
    scene.world = None
    _expect(validate.NO_WORLD)


def check_dark_world():
    scene, _cube, _camera = _good_scene()
    scene.world.node_tree.nodes["Background"].inputs["Strength"].default_value = 0.0
    _expect(validate.DARK_WORLD)


def check_missing_camera_image():
    scene, _cube, _camera = _good_scene()
    scene.diffrec.target_source = "CAMERA_IMAGES"
    _expect("has no image")


def check_unreadable_camera_image():
    scene, _cube, camera = _good_scene()
    scene.diffrec.target_source = "CAMERA_IMAGES"
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "photo.png"
        image = bpy.data.images.new("photo", 4, 4)
        image.filepath_raw, image.file_format = str(path), "PNG"
        image.save()
        bpy.data.images.remove(image)
        background = camera.data.background_images.new()
        background.image = bpy.data.images.load(str(path))
    background.image.reload()  # the file is gone, as when a .blend moved without its photos
    _expect("cannot be read")


def _photo_camera(width: int, height: int):
    """The good scene with Camera images as targets and a ``width`` x ``height`` photo as its
    camera's background image (the render frame is 1920x1080); (scene, background entry)."""
    scene, _cube, camera = _good_scene()
    scene.diffrec.target_source = "CAMERA_IMAGES"
    background = camera.data.background_images.new()
    background.image = bpy.data.images.new("photo", width, height)
    return scene, background


def check_a_photo_of_the_frames_shape_is_taken_and_of_another_refused():
    _photo_camera(32, 18)
    assert _problems() == [], _problems()
    addon.unregister()
    _photo_camera(32, 24)  # 4:3 in a 16:9 frame: the camera fits it, its intrinsics would not
    _expect("is 32x24 and the render frame 1920x1080, another shape")


def check_a_photo_in_a_colour_space_not_read_is_refused():
    _scene, background = _photo_camera(32, 18)
    background.image.colorspace_settings.name = "Display P3"
    _expect("is 8-bit in the colour space 'Display P3', which diffrec does not read")


def check_a_photo_flipped_in_the_camera_view_is_refused():
    _scene, background = _photo_camera(32, 18)
    background.use_flip_x = True
    _expect("moved, turned, scaled or flipped in the camera view")


def check_a_movie_clip_background_is_no_photo():
    _scene, background = _photo_camera(32, 18)
    background.source = "MOVIE_CLIP"  # its image left set, unused by the camera
    _expect("has no image")


def check_the_panel_says_when_no_photo_has_alpha_and_the_server_cuts_them_out():
    scene, background = _photo_camera(32, 18)  # a new image without alpha, as a JPEG loads
    settings = scene.diffrec
    try:
        assert panel.photos_note(bpy.context, settings) == (
            "No photo has alpha: the server cuts the object out of them")
        background.image = bpy.data.images.new("cut out", 32, 18, alpha=True)
        assert panel.photos_note(bpy.context, settings) is None, "the photos' alpha is the mask"
        settings.target_source = "RENDER"
        assert panel.photos_note(bpy.context, settings) is None
    finally:
        addon.unregister()


def _write_png16(path: Path, rgba: np.ndarray) -> None:
    """A 16-bit RGBA PNG of ``rgba`` [H, W, 4] uint16 (PNG's alpha is straight)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    rows = b"".join(b"\x00" + row.astype(">u2").tobytes() for row in rgba)
    header = struct.pack(">IIBBBBB", rgba.shape[1], rgba.shape[0], 16, 6, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                     + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def check_a_16_bit_photo_is_sent_with_straight_alpha():
    """Blender holds a 16-bit PNG photo as float, premultiplied; the wire wants straight
    alpha, as the file has it (its sRGB colour decoded once)."""
    from addon.core.wire import protocol

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "photo.png"
        _write_png16(path, np.tile(np.array([32896, 65535, 0, 32768], np.uint16), (2, 4, 1)))
        sent = export_scene.photo_array(bpy.data.images.load(str(path)))
    red = protocol().images.srgb_to_linear(np.float32(32896 / 65535))
    assert np.allclose(sent, [red, 1.0, 0.0, 0.5], atol=2e-3), sent[0, 0]


# -- previews --------------------------------------------------------------------------------


def _pixels(image) -> np.ndarray:
    width, height = image.size
    flat = np.empty(width * height * 4, np.float32)
    image.pixels.foreach_get(flat)
    return flat.reshape(height, width, 4)[::-1]  # rows top-down


def check_preview_image_shows_render_and_target():
    from addon import scene_updates

    render = np.zeros((4, 6, 3), np.float32)
    target = np.ones((4, 6, 4), np.float32)
    render[0, 0] = (1.0, 0.0, 0.0)  # top-left of the render
    image = scene_updates.update_preview(render, target)
    shown = _pixels(image)
    assert tuple(image.size) == (12, 4)
    assert np.allclose(shown[0, 0], (1, 0, 0, 1)) and np.allclose(shown[:, 6:], 1)


def check_nerf_export_then_import_gives_the_same_cameras():
    scene, _cube, camera = _good_scene()
    scene.render.engine = "CYCLES"
    scene.cycles.device, scene.cycles.samples = "CPU", 2
    scene.render.resolution_x, scene.render.resolution_y = 32, 24
    camera.data.lens = 40.0
    try:
        with tempfile.TemporaryDirectory() as directory:
            assert bpy.ops.diffrec.export_nerf(directory=directory) == {"FINISHED"}
            assert (Path(directory) / "train" / "r_0.png").exists()
            transforms = str(Path(directory) / "transforms_train.json")
            assert bpy.ops.diffrec.import_nerf(filepath=transforms) == {"FINISHED"}
            imported = [o for o in scene.objects if o.type == "CAMERA" and o is not camera]
            assert len(imported) == 1
            copy = imported[0]
            assert np.allclose(np.array(copy.matrix_world), np.array(camera.matrix_world),
                               atol=1e-5)
            # the same horizontal field of view (the sensor fit is AUTO on a landscape image)
            assert abs(copy.data.angle_x - camera.data.angle_x) < 1e-6
            assert tuple(export_scene.camera_image(copy).size) == (32, 24)
            assert scene.diffrec.target_source == "CAMERA_IMAGES"
    finally:
        addon.unregister()


def check_nerf_intrinsics_with_an_off_centre_principal_point_are_kept():
    """fl_x, fl_y, cx, cy in a transforms file (as instant-ngp writes them) reach both the
    imported cameras and the targets the Dataset source sends, not only camera_angle_x."""
    import json

    from addon import submission

    addon.register()
    scene = bpy.context.scene
    with tempfile.TemporaryDirectory() as directory:
        image = bpy.data.images.new("view", 32, 24)
        image.filepath_raw, image.file_format = str(Path(directory) / "view.png"), "PNG"
        image.save()
        wanted = (30.0, 30.0, 14.0, 10.0)
        transforms = Path(directory) / "transforms_train.json"
        transforms.write_text(json.dumps({
            "camera_angle_x": 2 * math.atan(16 / 30), "fl_x": 30.0, "fl_y": 30.0, "cx": 14.0,
            "cy": 10.0, "w": 32, "h": 24,
            "frames": [{"file_path": "./view", "transform_matrix": np.eye(4).tolist()}]}))
        try:
            assert bpy.ops.diffrec.import_nerf(filepath=str(transforms)) == {"FINISHED"}
            camera = next(o for o in scene.objects if o.name.startswith("view 000"))
            _poses, intrinsics = export_scene.export_cameras([camera], scene, (32, 24))
            assert np.allclose(intrinsics[0, :4], wanted, atol=1e-4), intrinsics
            scene.diffrec.dataset_path = directory
            _images, _poses, sent = submission.dataset_targets(scene.diffrec.dataset_path)
            assert not submission.poses_found(scene.diffrec.dataset_path), "renders' poses"
            assert np.allclose(sent[0, :4], wanted), sent
        finally:
            addon.unregister()


def check_llff_capture_as_dataset_targets_and_import():
    """An LLFF capture (poses_bounds.npy, images_2/, full-size masks/): the Dataset source
    sends the masks as alpha and the focal length scaled to the images read; File > Import
    makes a camera whose projection is the same."""
    from addon import submission
    from addon.core.wire import protocol

    addon.register()
    scene = bpy.context.scene
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        for folder, size in (("images", (32, 24)), ("masks", (32, 24)), ("images_2", (16, 12))):
            image = bpy.data.images.new(folder, *size)
            pixels = np.ones((size[1], size[0], 4), np.float32)
            pixels[:, : size[0] // 2, :3] = 0.0  # left half black (masks: not covered)
            image.pixels.foreach_set(pixels.reshape(-1))
            (root / folder).mkdir()
            image.filepath_raw, image.file_format = str(root / folder / "a.png"), "PNG"
            image.save()
        pose = np.eye(4)
        pose[:3, 3] = (0.5, -1.0, 4.0)
        protocol().captures.write_llff(root, pose[None], 24, 32, 20.0, np.array([1.0]),
                                       np.array([9.0]))
        try:
            scene.diffrec.dataset_path = directory
            images, poses, sent = submission.dataset_targets(scene.diffrec.dataset_path)
            assert images.shape == (1, 24, 32, 4), images.shape  # full size: images/
            assert images[0, 5, 3, 3] == 0 and images[0, 5, 30, 3] == 1, "mask as alpha"
            assert np.allclose(sent[0], (20.0, 20.0, 16.0, 12.0, 0.5, 18.0)), sent
            assert np.allclose(poses[0], pose), "LLFF axes converted; a lone camera stays put"
            path = str(root / "poses_bounds.npy")
            assert bpy.ops.diffrec.import_nerf(filepath=path) == {"FINISHED"}
            camera = next(o for o in scene.objects if o.name.startswith("view 000"))
            _poses, intrinsics = export_scene.export_cameras([camera], scene, (32, 24))
            assert np.allclose(intrinsics[0, :4], (20.0, 20.0, 16.0, 12.0), atol=1e-4)
        finally:
            addon.unregister()



def check_capture_tool_folder_as_dataset_targets():
    """A capture tool's transforms.json (pinhole intrinsics at the top, mask_path per frame):
    the Dataset source sends the mask as alpha and the stated intrinsics, and without
    mask_path the masks the backend made (masks_auto/); the same folder with an OPENCV lens
    is refused with the sentence that says the backend undistorts it."""
    import json

    from addon import submission
    from addon.core.wire import protocol

    addon.register()
    scene = bpy.context.scene
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        for folder in ("images", "masks"):
            image = bpy.data.images.new(folder, 32, 24)
            pixels = np.ones((24, 32, 4), np.float32)
            pixels[:, :16, :3] = 0.0  # left half black (the mask: not covered)
            image.pixels.foreach_set(pixels.reshape(-1))
            (root / folder).mkdir()
            image.filepath_raw, image.file_format = str(root / folder / "a.png"), "PNG"
            image.save()
        pose = np.eye(4)
        pose[:3, 3] = (0.5, -1.0, 4.0)
        content = {"fl_x": 20.0, "fl_y": 21.0, "cx": 15.0, "cy": 12.5, "w": 32, "h": 24,
                   "frames": [{"file_path": "images/a.png", "mask_path": "masks/a.png",
                               "transform_matrix": pose.tolist()}]}
        (root / "transforms.json").write_text(json.dumps(content))
        try:
            scene.diffrec.dataset_path = directory
            images, poses, sent = submission.dataset_targets(scene.diffrec.dataset_path)
            assert images.shape == (1, 24, 32, 4), images.shape
            assert images[0, 5, 3, 3] == 0 and images[0, 5, 30, 3] == 1, "mask as alpha"
            assert np.allclose(sent[0, :4], (20.0, 21.0, 15.0, 12.5)), sent
            assert np.allclose(poses[0], pose), "a lone camera is not recentred"
            assert submission.poses_found(scene.diffrec.dataset_path), "refined by the job"
            # without mask_path nor masks/: the masks the backend made for the capture
            (root / "masks_auto" / "images").mkdir(parents=True)
            (root / "masks" / "a.png").rename(root / "masks_auto" / "images" / "a.png")
            (root / "masks").rmdir()
            del content["frames"][0]["mask_path"]
            (root / "transforms.json").write_text(json.dumps(content))
            images, _poses, _sent = submission.dataset_targets(scene.diffrec.dataset_path)
            assert images[0, 5, 3, 3] == 0 and images[0, 5, 30, 3] == 1, "made masks as alpha"
            content.update(camera_model="OPENCV", k1=-0.1)
            (root / "transforms.json").write_text(json.dumps(content))
            try:
                submission.dataset_targets(scene.diffrec.dataset_path)
            except protocol().captures.CaptureError as error:
                assert "lens distortion" in str(error) and "diffrec submit" in str(error)
            else:
                raise AssertionError("a distorted capture was read as a pinhole one")
        finally:
            addon.unregister()


harness.main(globals())
