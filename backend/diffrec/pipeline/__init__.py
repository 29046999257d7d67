"""The reconstruction pipeline: passes, UV unwrapping, texture baking and outputs."""
