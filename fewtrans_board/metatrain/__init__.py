"""Episodic meta-training of a backbone on a source dataset (``fewtrans-board meta-train``).

It writes the checkpoint that the ``meta-trained`` model of :mod:`fewtrans_board.methods.meta`
loads; the test-time rules live there.
"""
