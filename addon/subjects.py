"""Which objects a job is about (main thread only): the reference the targets show, the start
the fit begins from, and what every target render hides.

- The **reference** is what the target renders show: the scene as rendered (``SCENE``), or
  one object alone (``OBJECT``: the panel's Reference Object, else the active mesh) with every
  other object that has geometry hidden from the renders (lights and the world stay). It is
  never changed.
- The **start** is the mesh the fit begins from: the active mesh (``SELECTED``), or a copy of
  the reference decimated to the panel's Triangles (``BAKED``); ``AUTO`` is SELECTED where
  the active mesh is another object than the reference (the artist's own low-poly), else
  BAKED when Triangles is set, else SELECTED (``start_kind``). Where the reference is another
  mesh than the start, Cycles bakes it onto a copy of the start first (``bakes_reference``,
  ``addon.bake_start``): the decimated copy, or the artist's own low-poly with its UVs, as
  Blender's own route does.
- Hidden from every target render, whatever the reference: a start that is not the
  reference, every result in the results collection, and the live mesh, so that no job
  trains on what diffrec made or on the copy the artist placed beside the original.

A result picked as the active object stands for its original (``original_of``): pressing
Optimize again optimises the original, never the result.
"""

from __future__ import annotations

import contextlib

import bpy

from . import import_result, scene_updates

GEOMETRY_TYPES = frozenset({"MESH", "CURVE", "CURVES", "SURFACE", "META", "FONT",
                            "POINTCLOUD", "VOLUME", "GREASEPENCIL", "GPENCIL"})
"""Object types that draw something in a render (hidden when the reference is one object)."""


def draws_in_render(obj: bpy.types.Object) -> bool:
    """Whether ``obj`` puts geometry into a render: its own (``GEOMETRY_TYPES``) or a
    collection's or its children's it instances (an Empty holding a linked asset)."""
    return obj.type in GEOMETRY_TYPES or obj.is_instancer


def original_of(obj: bpy.types.Object | None) -> bpy.types.Object | None:
    """``obj``, or the object it is a result of when it is one (and that object still
    exists)."""
    if obj is None:
        return None
    original = import_result.original_mark(obj)
    return original if original is not None and original != obj else obj


def subject(context) -> bpy.types.Object | None:
    """The active object when it is selected (its original when it is a result), else None."""
    active = context.active_object
    if active is None or not active.select_get():
        return None
    return original_of(active)


def reference_object(context, settings) -> bpy.types.Object | None:
    """The object the targets show: the panel's Reference Object when set where the panel
    shows it (the targets rendered here), else the subject (None when neither is a mesh)."""
    shown = settings.reference_object if settings.target_source == "RENDER" else None
    chosen = shown or subject(context)
    return chosen if chosen is not None and chosen.type == "MESH" else None


def triangle_count(obj: bpy.types.Object, depsgraph) -> int:
    """Triangles of ``obj``'s evaluated mesh (modifiers applied): what its export sends."""
    evaluated = obj.evaluated_get(depsgraph)
    mesh = evaluated.to_mesh()
    try:
        mesh.calc_loop_triangles()
        return len(mesh.loop_triangles)
    finally:
        evaluated.to_mesh_clear()


def evaluated(obj: bpy.types.Object, view_layer) -> bool:
    """Whether Blender evaluates ``obj``'s modifiers in ``view_layer``: False when it or every
    collection path to it is disabled in viewports (the monitor icon) or excluded, and its
    evaluated mesh is then the bare one (hidden with the eye, it is still evaluated)."""
    return _enabled(obj, view_layer, "hide_viewport")


def renders(obj: bpy.types.Object, view_layer) -> bool:
    """Whether ``obj`` shows in ``view_layer``'s renders: False when it or every collection
    path to it is disabled in renders (the camera icon) or excluded."""
    return _enabled(obj, view_layer, "hide_render")


def _enabled(obj: bpy.types.Object, view_layer, flag: str) -> bool:
    """Whether ``obj``'s ``flag`` is off and a collection holding it is reached from the view
    layer through collections none of which is excluded or has ``flag`` on."""
    if getattr(obj, flag):
        return False
    holders = set(obj.users_collection)

    def reaches(layer) -> bool:
        if layer.exclude or getattr(layer.collection, flag):
            return False
        return layer.collection in holders or any(reaches(child) for child in layer.children)

    return reaches(view_layer.layer_collection)


def render_lamps(scene, view_layer) -> int:
    """How many lamps (light objects with energy above 0) light ``scene``'s renders: light
    diffrec is never sent, so the world alone is not the light of those renders."""
    return sum(1 for obj in scene.objects
               if obj.type == "LIGHT" and obj.data.energy > 0 and renders(obj, view_layer))


def start_kind(context, settings) -> str:
    """``SELECTED`` or ``BAKED``: the panel's Start From, AUTO decided by the selection and
    Triangles: the selected mesh where it is another mesh than the reference (the artist's own
    low-poly), else a baked copy of the reference where Triangles is set, else the selected
    mesh. A reconstruction starts from neither (it finds the surface itself)."""
    if settings.start_from != "AUTO":
        return settings.start_from
    selected, reference = subject(context), reference_object(context, settings)
    if selected is not None and selected.type == "MESH" and reference not in (None, selected):
        return "SELECTED"
    return "BAKED" if settings.triangles > 0 else "SELECTED"


def bakes_reference(start: str | None, subject, reference, source: str) -> bool:
    """Whether Optimize bakes the ``reference`` onto a copy of the start before the job: the
    reference decimated (``start`` BAKED), or the selected mesh ``subject`` (``start``
    SELECTED) where the targets are rendered (``source`` RENDER, where the panel shows the
    Reference Object) and the reference is another mesh (the artist's own low-poly beside the
    high-poly). Its maps go with the job, which starts from them."""
    return start == "BAKED" or (start == "SELECTED" and source == "RENDER"
                                and subject is not None and reference is not None
                                and subject != reference)


def renders_start(source: str, bakes: bool) -> bool:
    """Whether Optimize renders the start from the target cameras too (the start renders,
    ``start_images``): the add-on renders the targets (``source`` RENDER) and ``bakes`` the
    reference onto the start (``bakes_reference``), whose maps go with the job, so that the
    backend renders the start as Cycles did. A start without them sends no material: its job
    starts from a grey levelled to the targets, which no render of the mesh in its own
    material shows, and the backend would paint that grey into the targets (it refuses such
    renders)."""
    return source == "RENDER" and bakes


def made_by_diffrec(scene) -> list[bpy.types.Object]:
    """The objects diffrec made in ``scene``: results and the live mesh."""
    results = import_result.results_collection(scene)
    found = list(results.all_objects) if results is not None else []
    live = bpy.data.objects.get(scene_updates.LIVE_MESH)
    if live is not None:
        found.append(live)
    return [obj for obj in found if obj.name in scene.objects]


def hidden_from_targets(scene, reference: bpy.types.Object | None, alone: bool,
                        start: bpy.types.Object | None = None) -> list[bpy.types.Object]:
    """The objects a target render hides: what diffrec made, a ``start`` other than the
    reference, and, with ``alone``, every other object with geometry but the reference."""
    hidden = set(made_by_diffrec(scene))
    if start is not None and start != reference:
        hidden.add(start)
    if alone and reference is not None:
        hidden |= {obj for obj in scene.objects
                   if draws_in_render(obj) and obj != reference}
    hidden.discard(reference)
    return sorted(hidden, key=lambda obj: obj.name)


@contextlib.contextmanager
def hidden_from_render(objects):
    """``hide_render`` set on ``objects`` for the block, each restored to its own value."""
    saved = [(obj, obj.hide_render) for obj in objects]
    try:
        for obj, _ in saved:
            obj.hide_render = True
        yield
    finally:
        for obj, value in saved:
            obj.hide_render = value
