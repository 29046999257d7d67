"""The benchmark's objects, built with bpy from Blender's primitives: each a single closed
surface (parts are merged by exact Boolean unions and cut by exact differences, so no hidden
inner faces are left for the geometry metrics to trip over).

Every builder returns one mesh object with its modifiers applied; the caller scales it into
the unit sphere (``diffrec_bench.demo.scene.fit_to_unit_sphere``). Sizes are in Blender units
before that scaling, Z up.
"""

from __future__ import annotations

import math

import bpy


def active_object() -> bpy.types.Object:
    return bpy.context.view_layer.objects.active


def _sphere(radius: float, location=(0, 0, 0), scale=(1, 1, 1)) -> bpy.types.Object:
    bpy.ops.mesh.primitive_uv_sphere_add(segments=48, ring_count=24, radius=radius,
                                         location=location, scale=scale)
    return active_object()


def _cylinder(radius: float, depth: float, location=(0, 0, 0), rotation=(0, 0, 0),
              vertices: int = 48) -> bpy.types.Object:
    bpy.ops.mesh.primitive_cylinder_add(vertices=vertices, radius=radius, depth=depth,
                                        location=location, rotation=rotation)
    return active_object()


def _torus(major: float, minor: float, location=(0, 0, 0), rotation=(0, 0, 0)):
    bpy.ops.mesh.primitive_torus_add(major_radius=major, minor_radius=minor, major_segments=64,
                                     minor_segments=20, location=location, rotation=rotation)
    return active_object()


def _box(size, location=(0, 0, 0), rotation=(0, 0, 0)) -> bpy.types.Object:
    bpy.ops.mesh.primitive_cube_add(size=1.0, location=location, rotation=rotation, scale=size)
    return active_object()


def apply_modifiers(obj: bpy.types.Object) -> bpy.types.Object:
    """Apply every modifier of ``obj`` (in order) and its transform; the bake peer's assets
    use it too."""
    bpy.ops.object.select_all(action="DESELECT")
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj
    for modifier in list(obj.modifiers):
        bpy.ops.object.modifier_apply(modifier=modifier.name)
    bpy.ops.object.transform_apply(location=True, rotation=True, scale=True)
    return obj


def _boolean(obj: bpy.types.Object, others, operation: str) -> bpy.types.Object:
    """``obj`` united with / minus each of ``others`` (exact solver); ``others`` are deleted."""
    for other in others:
        modifier = obj.modifiers.new(f"{operation} {other.name}", "BOOLEAN")
        modifier.operation, modifier.solver, modifier.object = operation, "EXACT", other
        apply_modifiers(obj)
        bpy.data.objects.remove(other, do_unlink=True)
    return obj


def union(obj, *others):
    return _boolean(obj, others, "UNION")


def difference(obj, *others):
    return _boolean(obj, others, "DIFFERENCE")


def _smooth(obj: bpy.types.Object, smooth: bool = True) -> bpy.types.Object:
    if smooth:
        obj.data.shade_smooth()
    else:
        obj.data.shade_flat()
    return obj


def ring_with_head() -> bpy.types.Object:
    """Genus 1: a standing ring (hole seen from the side cameras) with a ball on top."""
    ring = _torus(1.0, 0.22, rotation=(math.pi / 2, 0, 0))
    head = _sphere(0.42, location=(0, 0, 1.2))
    return _smooth(union(ring, head))


def torus() -> bpy.types.Object:
    """Genus 1, curved everywhere: a plump torus tilted 35 degrees, so the cameras see its
    top, its side and through its hole."""
    return _smooth(apply_modifiers(_torus(1.0, 0.4, rotation=(math.radians(35), 0, 0))))


def mug() -> bpy.types.Object:
    """Genus 1 and a deep concavity: a cup hollowed almost to its base, with a ring handle."""
    body = _cylinder(0.7, 1.6)
    hollow = _cylinder(0.6, 1.6, location=(0, 0, 0.15))
    cup = difference(body, hollow)
    handle = _torus(0.45, 0.09, location=(0.95, 0, 0.1), rotation=(math.pi / 2, 0, 0))
    handle = difference(handle, _box((2, 2, 2), location=(0.65 - 1, 0, 0)))  # ends in the wall
    return _smooth(union(cup, handle))


def bowl() -> bpy.types.Object:
    """A deep concavity with a thin rim: a hemispherical shell open at the top."""
    shell = _sphere(1.0)
    inside = _sphere(0.9)
    lid = _box((3, 3, 2), location=(0, 0, 1.15))
    return _smooth(difference(shell, inside, lid))


def bevelled_box() -> bpy.types.Object:
    """Flat faces and sharp (slightly bevelled) edges: a box of 2 x 1.4 x 1."""
    box = _box((2.0, 1.4, 1.0))
    bevel = box.modifiers.new("bevel", "BEVEL")
    bevel.width, bevel.segments = 0.06, 2
    return _smooth(apply_modifiers(box), smooth=False)


def tilted_box() -> bpy.types.Object:
    """``bevelled_box`` turned off the axes, so that patterns laid out along the axes cross
    every face at an angle."""
    box = bevelled_box()
    box.rotation_euler = (math.radians(20), math.radians(-15), math.radians(30))
    return apply_modifiers(box)


def prism() -> bpy.types.Object:
    """Sharp 60-degree edges and flat faces: a triangular prism lying on one side face."""
    return _smooth(apply_modifiers(_cylinder(1.0, 1.6, rotation=(math.pi / 2, 0, 0), vertices=3)),
                   smooth=False)


def blob() -> bpy.types.Object:
    """A smooth organic shape: five metaballs melted together, converted to a mesh."""
    data = bpy.data.metaballs.new("blob")
    data.resolution = data.render_resolution = 0.08
    for (x, y, z), radius in (((0, 0, 0), 0.9), ((0.7, 0.2, 0.3), 0.6), ((-0.6, -0.3, 0.2), 0.65),
                              ((0.1, 0.5, -0.5), 0.55), ((-0.2, -0.2, 0.8), 0.5)):
        element = data.elements.new()
        element.co, element.radius = (x, y, z), radius
    ball = bpy.data.objects.new("blob", data)
    bpy.context.scene.collection.objects.link(ball)
    bpy.context.view_layer.update()
    depsgraph = bpy.context.evaluated_depsgraph_get()
    mesh = bpy.data.meshes.new_from_object(ball.evaluated_get(depsgraph))
    bpy.data.objects.remove(ball, do_unlink=True)
    obj = bpy.data.objects.new("blob mesh", mesh)
    bpy.context.scene.collection.objects.link(obj)
    return _smooth(obj)


def fish() -> bpy.types.Object:
    """Thin parts: a slender body with a dorsal fin, a tail fin and two side fins, each
    0.04 thick (about 1 % of the object's size)."""
    body = _sphere(1.0, scale=(1.0, 0.3, 0.42))
    dorsal = _box((0.7, 0.04, 0.5), location=(-0.05, 0, 0.5), rotation=(0, 0.5, 0))
    tail = _box((0.5, 0.04, 0.8), location=(-1.1, 0, 0), rotation=(0, 0.2, 0))
    left = _box((0.35, 0.45, 0.04), location=(0.2, 0.35, -0.15), rotation=(0.4, 0, 0))
    right = _box((0.35, 0.45, 0.04), location=(0.2, -0.35, -0.15), rotation=(-0.4, 0, 0))
    return _smooth(union(body, dorsal, tail, left, right))


def critter() -> bpy.types.Object:
    """Thin parts: a body on four thin legs, with a head and two pointed ears."""
    body = _sphere(0.8, scale=(1.0, 0.6, 0.5), location=(0, 0, 0.3))
    legs = [_cylinder(0.06, 0.9, location=(x, y, -0.35))
            for x in (-0.5, 0.5) for y in (-0.25, 0.25)]
    head = _sphere(0.35, location=(0.85, 0, 0.75))
    ears = []
    for y in (-0.15, 0.15):
        bpy.ops.mesh.primitive_cone_add(vertices=24, radius1=0.1, radius2=0.0, depth=0.45,
                                        location=(0.8, y, 1.15), rotation=(0.35 * y / 0.15, 0, 0))
        ears.append(active_object())
    return _smooth(union(body, *legs, head, *ears))


SHAPES = {builder.__name__: builder for builder in (
    ring_with_head, torus, mug, bowl, bevelled_box, tilted_box, prism, blob, fish, critter)}
