"""The package's version: one place, below every layer that records it in provenance."""

__version__ = "0.1.0"
