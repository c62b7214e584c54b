"""Evaluation runner: shards of episodes, every HPE configuration, resumable Parquet output.

``spec -> plan -> session``: CONTRIBUTING.md, "The runner: spec, plan, session".
"""
