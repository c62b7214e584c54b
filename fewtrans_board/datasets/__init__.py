"""Dataset specifications, readers of local copies, and the built-in dataset catalogue."""
