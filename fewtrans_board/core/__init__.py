"""Layer 0, the ground floor, importing nothing else of ``fewtrans_board``.

Errors, the version, canonical JSON, atomic writes, plugin-call tracing, threads, and the OS
sandbox of plugin workers.
"""
