"""diffrec: turn images of an object into a mesh, PBR textures and an environment map.

The backend package. It never imports bpy; the Blender add-on talks to it over ZeroMQ.
"""

__version__ = "0.1.0"
