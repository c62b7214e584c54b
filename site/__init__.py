"""Jinja templates and static assets of the leaderboard site (installed as fewtrans_board.site_files)."""
