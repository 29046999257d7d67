"""Scene pieces the bpy checks share: cameras around the origin, an HDRI world, a cube ready
for Optimize."""

import bpy
import numpy as np


def cameras_around(scene, count: int, radius: float, height: float) -> list:
    """``count`` perspective cameras 'cam0'... evenly around the Z axis at ``radius`` and
    ``height``, each looking at the origin."""
    cameras = []
    for index in range(count):
        angle = 2 * np.pi * index / count
        camera = bpy.data.objects.new(f"cam{index}", bpy.data.cameras.new(f"cam{index}"))
        scene.collection.objects.link(camera)
        camera.location = (radius * np.cos(angle), radius * np.sin(angle), height)
        camera.rotation_euler = (-camera.location).to_track_quat("-Z", "Y").to_euler()
        cameras.append(camera)
    return cameras


def sky_world(scene, rows: np.ndarray, width: int) -> bpy.types.World:
    """Light ``scene`` with the world 'sky': an Environment Texture of a packed float image
    'sky', ``width`` texels wide, grey rows of ``rows`` (top-down, linear) brightness."""
    rows = np.asarray(rows, np.float32)
    sky = bpy.data.images.new("sky", width, len(rows), float_buffer=True)
    texels = np.ones((len(rows), width, 4), np.float32)
    texels[..., :3] = rows[::-1, None, None]  # Blender rows are bottom-up
    sky.pixels.foreach_set(texels.reshape(-1))
    sky.pack()
    world = bpy.data.worlds.new("sky")
    world.use_nodes = True
    environment = world.node_tree.nodes.new("ShaderNodeTexEnvironment")
    environment.image = sky
    world.node_tree.links.new(environment.outputs["Color"],
                              world.node_tree.nodes["Background"].inputs["Color"])
    scene.world = world
    return world


def cube_to_optimize(scene, views: int, frame: tuple[int, int]) -> bpy.types.Object:
    """A unit cube, selected and active, seen by ``views`` cameras (``cameras_around``) under
    a plain HDRI world, rendered by Cycles on the CPU at 1 sample in a ``frame`` (width,
    height) render frame and trained at 16 px: the scene a check presses Optimize in."""
    scene.render.engine = "CYCLES"
    scene.cycles.device, scene.cycles.samples = "CPU", 1
    scene.render.resolution_x, scene.render.resolution_y = frame
    bpy.ops.mesh.primitive_cube_add(size=1.0)
    cube = bpy.context.active_object
    cameras_around(scene, views, radius=5.0, height=1.0)
    sky_world(scene, np.ones(4), width=8)
    cube.select_set(True)
    bpy.context.view_layer.objects.active = cube
    scene.diffrec.train_resolution = 16
    return cube
