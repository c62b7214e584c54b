"""The built-in methods: adapters, meta-learners and demo models.

:mod:`.adapters`, :mod:`.meta` and :mod:`.models` each depend on the contract and the building
blocks, never on one another; ``fewtrans_board.default_plugins`` registers them like a plugin.
"""
