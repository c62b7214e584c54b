"""A plugin that fails at import time."""

raise ImportError("simulated missing dependency 'nonexistent_lib'")
