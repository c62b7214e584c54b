"""``python -m fewtrans_board``: the same as the ``fewtrans-board`` command."""

from fewtrans_board.cli import main

main()
