"""Setups that cannot make a job, found before anything is rendered, exported or sent.

``problems(context, settings)`` lists every problem as a sentence the user can act on; the
Optimize operator refuses to start while the list is not empty. Besides the scene (a mesh
with faces, usable cameras, a world that lights), the panel's values are held to the server's
own bounds (``diffrec.protocol.settings``, and the smallest image it can score,
``images.MIN_SIDE``), so that nothing is rendered for a job the server would refuse.
"""

from __future__ import annotations

import numpy as np

from . import bake_start, export_scene, subjects
from .core import camera_model, panel_fields
from .core.wire import protocol
from .core.world_bounds import cube_corners, world_box

NOTHING_SELECTED = "Nothing is selected: select the mesh to optimise."
NO_CAMERAS = "The scene has no cameras: add cameras that look at the object."
NO_SELECTED_CAMERAS = "No camera is selected: select cameras or use all cameras."
NO_WORLD = "The scene has no world light: add a world with an HDRI or a colour."
DARK_WORLD = "The world emits no light: give its Background a colour and a strength above 0."
NO_REFERENCE = ("Nothing to bake from: select the heavy mesh, or set the Reference Object, "
                "to start from its baked copy.")
FEW_TRIANGLES = "Triangles is below 4: set a budget of at least 4 triangles, or 0 for none."


def target_cameras(context, settings) -> list:
    """The cameras the job uses, sorted by name: all in the scene, or the selected ones."""
    objects = context.selected_objects if settings.cameras == "SELECTED" else context.scene.objects
    return sorted((obj for obj in objects if obj.type == "CAMERA"), key=lambda obj: obj.name)


def _subject_problems(context, settings) -> list[str]:
    problems = [FEW_TRIANGLES] if 0 < settings.triangles < 4 else []
    if settings.mode == "reconstruct":
        return problems
    shown = subjects.reference_object(context, settings)
    start = subjects.start_kind(context, settings)
    baked = start == "BAKED"
    bakes = subjects.bakes_reference(start, subjects.subject(context), shown,
                                     settings.target_source)
    if shown is not None and settings.target_source == "RENDER" and (
            bakes or settings.reference == "OBJECT") and context.scene in shown.users_scene \
            and not subjects.renders(shown, context.view_layer):  # elsewhere: _mesh_problems
        problems.append(f"'{shown.name}' is disabled in renders (the camera icon, on it or on "
                        "a collection holding it, or its collection is excluded), so the "
                        "target renders would not show it: enable it in renders.")
    if (bakes and shown is not None and settings.mode == "materials"
            and settings.shading == "path-traced" and bake_start.uniform_coat(shown)):
        problems.append(f"'{shown.name}' has one clear coat over it, which the fit keeps as a "
                        "layer of its own and path-traced Shading does not shade: set Shading "
                        "to Fast, or remove the coat.")
    if baked and shown is not None:
        return problems + _mesh_problems(context, [shown])
    subject = subjects.subject(context)
    if subject is None or subject.type != "MESH":
        offered = settings.target_source == "RENDER"  # where the panel shows the field
        return [*problems, _selection_problem(context, subject, baked, offered)]
    return problems + _mesh_problems(context, [subject, shown])


def _selection_problem(context, subject, baked: bool, offered: bool) -> str:
    """Why the selection gives no mesh to start from (``subject``, the active object when
    selected, is None or not a mesh): an active object that is not a mesh, a mesh selected
    but not active (Optimize reads the active object), an active mesh hidden with the eye
    icon (which deselects it), else nothing selected (``baked``: and no Reference Object to
    bake from). The Reference Object is suggested only where the panel shows it
    (``offered``)."""
    if subject is not None:
        kind = "text object" if subject.type == "FONT" else subject.type.lower()
        article = "an" if kind[0] in "aeiou" else "a"
        return f"'{subject.name}' is {article} {kind}, not a mesh: select a mesh object."
    mesh = min((obj for obj in context.selected_objects if obj.type == "MESH"),
               key=lambda obj: obj.name, default=None)
    if mesh is not None:
        return (f"'{mesh.name}' is selected but not active, and Optimize works on the active "
                "object: click it to make it active.")
    hidden = context.view_layer.objects.active
    if hidden is not None and hidden.type == "MESH" and hidden.hide_get(
            view_layer=context.view_layer):
        if not offered:
            advice = "unhide it (Alt+H) and select it."
        elif baked:
            advice = ("set it as the Reference Object (it may stay hidden), or unhide it "
                      "(Alt+H) and select it.")
        else:
            advice = ("unhide it (Alt+H) and select it, or give a Triangles budget and set it "
                      "as the Reference Object to optimise a baked copy of it, hidden.")
        return (f"'{hidden.name}' is hidden (the eye icon), and a hidden object is not "
                f"selected: {advice}")
    return NO_REFERENCE if baked and offered else NOTHING_SELECTED


def _mesh_problems(context, meshes) -> list[str]:
    """A sentence for each of ``meshes`` (None left out, each once) that is not in the scene,
    that Blender does not evaluate (so its modifiers would be lost) or that has no faces."""
    depsgraph = context.evaluated_depsgraph_get()
    found = []
    for obj in dict.fromkeys(mesh for mesh in meshes if mesh is not None):
        if context.scene not in obj.users_scene:
            found.append(f"'{obj.name}' is not in the scene '{context.scene.name}': link it "
                         "into this scene, or pick an object that is.")
        elif not subjects.evaluated(obj, context.view_layer):
            found.append(f"'{obj.name}' is disabled in viewports (the monitor icon, on it or on "
                         "a collection holding it, or its collection is excluded), so Blender "
                         "would give diffrec its mesh without modifiers: enable it in "
                         "viewports (to keep the viewport light, hide it with the eye icon "
                         "instead).")
        elif subjects.triangle_count(obj, depsgraph) == 0:
            found.append(f"'{obj.name}' has no faces (only vertices or edges): add faces to it, "
                         "or select a mesh that has some.")
    return found


def _seen_box(context, settings) -> tuple[np.ndarray, str] | None:
    """(corners [8, 3], what they bound, for the sentence) of the box every camera must see:
    the reference object's, or in Reconstruct with none, the cube the server looks for the
    surface in (``mesh_scale`` about ``center``, the settings' defaults: the panel does not
    change them); None where neither applies."""
    subject = subjects.reference_object(context, settings)
    if subject is not None:
        return world_box(subject), f"'{subject.name}'"
    if settings.mode != "reconstruct":
        return None
    fields = protocol().settings.FIELDS
    side, center = fields["mesh_scale"].default, fields["center"].default
    where = ", ".join(f"{value:g}" for value in center)
    return (cube_corners(center, side),
            f"the cube of side {side:g} about ({where}) that Reconstruct finds the surface in")


def _camera_problems(context, settings, cameras) -> list[str]:
    problems = []
    size = export_scene.render_size(context.scene)
    seen = _seen_box(context, settings)
    for camera in cameras:
        if camera.data.type != "PERSP":
            kind = {"ORTHO": "orthographic", "PANO": "panoramic"}.get(camera.data.type,
                                                                      camera.data.type)
            problems.append(
                f"Camera '{camera.name}' is {kind}, and diffrec renders through perspective "
                "cameras only: set its Type to Perspective, or leave it out (select the other "
                "cameras and set Cameras to Selected).")
            continue
        if seen is not None:
            pose, intrinsics = export_scene.export_camera(camera, context.scene, size)
            if not camera_model.sees_box(seen[0], pose, intrinsics[:4], size):
                problems.append(f"Camera '{camera.name}' does not see {seen[1]}: aim it at "
                                "the object or leave it out.")
        if settings.target_source == "CAMERA_IMAGES":
            problems += _photo_problems(camera, size)
    return problems


READ_8_BIT = frozenset({"sRGB", "Non-Color", "Linear Rec.709"})
"""The colour spaces in which an 8-bit photo is read (``export_scene.image_array``): sRGB
decoded, the others taken as linear values."""
ASPECT_TOLERANCE = 0.005
"""How far (relative) a photo's aspect may differ from the render frame's."""


def _photo_problems(camera, frame: tuple[int, int]) -> list[str]:
    """Why ``camera``'s photo cannot be a target as the camera shows it: none, not a still
    image, unreadable, in a colour space not read for 8-bit images, of another aspect than
    the render ``frame`` (the camera fits the photo to the frame; its intrinsics would not
    match), or moved, turned, scaled or flipped in the camera view."""
    name = camera.name
    background = export_scene.camera_background(camera)
    if background is None:
        return [f"Camera '{name}' has no image: add one as its background image."]
    image = background.image
    if image.source in ("SEQUENCE", "MOVIE"):
        kind = "an image sequence" if image.source == "SEQUENCE" else "a movie"
        return [f"The image of camera '{name}' is {kind}, and diffrec reads one still photo "
                "per camera: open a single image as its background image."]
    if tuple(image.size) == (0, 0):  # reading the size loads the file
        return [f"The image of camera '{name}' cannot be read ('{image.filepath}'): fix the "
                "path or remove the camera."]
    problems = []
    space = image.colorspace_settings.name
    if not image.is_float and space not in READ_8_BIT:
        problems.append(f"The image of camera '{name}' is 8-bit in the colour space "
                        f"'{space}', which diffrec does not read: set its Color Space to sRGB "
                        "(a photo) or Non-Color (linear values).")
    width, height = image.size
    if abs(width / height / (frame[0] / frame[1]) - 1) > ASPECT_TOLERANCE:
        problems.append(f"The image of camera '{name}' is {width}x{height} and the render "
                        f"frame {frame[0]}x{frame[1]}, another shape: set the scene's "
                        "Resolution to the photo's shape (Output properties), so the camera "
                        "sees what the photo shows.")
    if (background.use_flip_x or background.use_flip_y or background.rotation != 0
            or tuple(background.offset) != (0.0, 0.0) or background.scale != 1.0):
        problems.append(f"The image of camera '{name}' is moved, turned, scaled or flipped in "
                        "the camera view, and diffrec reads the photo as it is: reset its "
                        "Offset, Rotation, Scale and Flip (camera properties, Background "
                        "Images).")
    return problems


def world_problems(world) -> list[str]:
    """Why ``world`` lights nothing (none, a cut node tree, black or of strength 0), or []."""
    if world is None:
        return [NO_WORLD]
    _, background = export_scene.environment_node(world)
    if background is not None:  # an HDRI, lit by its strength (a linked one is not read)
        return [DARK_WORLD] if background.inputs["Strength"].default_value <= 0 else []
    if world.node_tree is None:
        return []
    if not any(node.bl_idname == "ShaderNodeOutputWorld" and node.inputs["Surface"].is_linked
               for node in world.node_tree.nodes):
        return [f"The world '{world.name}' has no shader linked to a World Output (its node "
                "tree is empty or cut), so the targets would render black: add a Background "
                "node linked to a World Output, or pick another world."]
    background = next(
        (node for node in world.node_tree.nodes if node.bl_idname == "ShaderNodeBackground"), None
    )
    if background is None:
        return []  # some other shader: it will be baked and judged by its light
    colour, strength = background.inputs["Color"], background.inputs["Strength"]
    dark = not colour.is_linked and max(colour.default_value[:3]) <= 0
    if (not strength.is_linked and strength.default_value <= 0) or dark:
        return [DARK_WORLD]
    return []


def _bounds_problems(context, settings) -> list[str]:
    """The panel's values the server would refuse (its settings' bounds), and training
    images too small for it to score (fewer than MIN_SIDE pixels on a side)."""
    wire = protocol()
    values = panel_fields.optimize_settings(settings, False)
    if 0 < settings.triangles < 4:
        del values["target_triangles"]  # FEW_TRIANGLES says it already
    try:
        wire.settings.parse_settings(values)
    except wire.settings.SettingsError as error:
        fields = {setting: field for field, setting in panel_fields.FIELD_SETTINGS.items()}
        field = fields.get(error.field)
        label = settings.bl_rna.properties[field].name if field else error.field or "Settings"
        return [f"{label}: the server refuses this value ({error}); change it in the panel."]
    if settings.target_source == "DATASET":
        return []  # the dataset's own size: the server checks it at submit
    frame = export_scene.render_size(context.scene)
    size = wire.images.longest_side_size(*frame, settings.train_resolution)
    if min(size) >= wire.images.MIN_SIDE:
        return []
    return [f"Resolution {settings.train_resolution} makes the training images {size[0]}x"
            f"{size[1]} pixels, and the server needs at least {wire.images.MIN_SIDE} on each "
            f"side to score the result: set Resolution to "
            f"{wire.images.smallest_longest_side(*frame)} or more."]


def problems(context, settings) -> list[str]:
    """Every reason the job cannot start, or [] when it can."""
    found = _subject_problems(context, settings) + _bounds_problems(context, settings)
    if settings.target_source != "DATASET":
        cameras = target_cameras(context, settings)
        if not cameras:
            found.append(NO_SELECTED_CAMERAS if settings.cameras == "SELECTED" else NO_CAMERAS)
        found += _camera_problems(context, settings, cameras)
    lamps = subjects.render_lamps(context.scene, context.view_layer)
    if world_is_all_light(settings.light, settings.target_source, lamps):
        found += world_problems(context.scene.world)
    return found


def world_is_all_light(light: str, target_source: str, lamps: int) -> bool:
    """Whether the job's light is the world's alone: kept (Light ``light`` Keep HDRI), or
    lighting target renders (``target_source`` RENDER) beside no ``lamps``."""
    return light == "KEEP" or (target_source == "RENDER" and lamps == 0)


def black_world(name: str) -> str:
    """The sentence for a world that renders black though its nodes pass ``world_problems``
    (a black or missing image feeding its Background, say) where it is all the light."""
    return (f"The world '{name}' renders black (whatever feeds its Background gives no "
            "light: a black or missing image, say), and it is all the light this job has: "
            "give the world light or pick another one, or light the scene with lamps and set "
            "Light to Auto.")
