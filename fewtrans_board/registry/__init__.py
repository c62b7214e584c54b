"""Plugin loading and the registry built from it.

:mod:`.manager` finds entry points, applies allow-lists and builds the pluggy manager;
:mod:`.lookup` holds the models, adapters and datasets the hooks declare; :mod:`.files`
digests a distribution's installed files.
"""
