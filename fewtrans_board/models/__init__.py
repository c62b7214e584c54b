"""Model specifications, the loaded ``Backbone`` interface and built-in model families."""
