"""The Hyperparameter Ensemble protocol: grids, aggregation and the centre search."""
