"""Built-in baseline adapters (registered by ``fewtrans_board.default_plugins.adapters``)."""
