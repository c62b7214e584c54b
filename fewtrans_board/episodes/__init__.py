"""Episode samplers, named sampling protocols and frozen episode manifests."""
