"""The leaderboard store, sub-benchmarks, submission bundles, validation and verification."""
