"""Where the cameras stand that render a reference mesh into targets (``ref_mesh``): nvdiffrec's
mesh mode (the mesh fitted to a box of side 2, cameras at radius 3, 45 degrees of field of
view), with elevations bounded, which nvdiffrec's are not (``reference_config.departures``
says so)."""

REFERENCE_CAMERA_RADIUS = 3.0
"""Distance of the cameras from the box's centre, in the fitted mesh's units."""
REFERENCE_FOV_DEGREES = 45.0
REFERENCE_ELEVATIONS_DEGREES = (-30.0, 60.0)
"""The cameras' lowest and highest elevation, in degrees above the horizontal."""
