"""Evaluation runner: shards of episodes, every HPE configuration, resumable Parquet output."""
