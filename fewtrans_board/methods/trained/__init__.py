"""Demo models trained on the embedded digits data (a small CNN and a small CLIP)."""
