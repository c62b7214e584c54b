"""Layer 0, the ground floor, importing nothing else of ``fewtrans_board``.

Errors, canonical JSON, atomic writes, plugin-call tracing, threads, release 0.1's moved
import paths, and the OS sandbox of plugin workers.
"""
