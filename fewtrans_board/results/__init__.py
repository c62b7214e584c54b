"""Results schema v1: per-episode x configuration rows in Parquet, with provenance."""
