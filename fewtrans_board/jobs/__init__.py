"""Whole jobs on the embedded data: the demo, the inductive-CLIP demo, the generated docs."""
