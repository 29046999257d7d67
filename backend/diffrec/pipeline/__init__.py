"""The reconstruction pipeline."""
