"""The add-on's modules that never import bpy: following a job on a worker thread
(``job_session``), failures as sentences (``messages``), the panel's fields as settings
(``panel_fields``), reaching the backend (``connection``, ``wire``), and the camera, pixel and
bounding-box conventions (``camera_model``, ``pixels``, ``world_bounds``). They run and are
tested in plain Python; tests/addon/test_core_without_bpy.py checks that none imports bpy."""
