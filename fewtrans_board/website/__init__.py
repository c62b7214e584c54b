"""The static leaderboard site: data views derived from per-episode rows, SVG plots, rendering."""
