"""The peer benchmark against Blender's own route (issue 50): see ``scripts/bench_bake_peer.py``."""
