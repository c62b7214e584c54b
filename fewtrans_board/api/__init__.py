"""The contract with plugins, torch-free: what a model, adapter or dataset must provide.

:mod:`.adapter` (``Adapter``, ``AdapterConfig``, ``hparam``, ``Predictor``), :mod:`.ranges`
(declared hyperparameter ranges), :mod:`.episode_data` (``SupportSet``, ``ImageSet``),
:mod:`.backbone` (``Backbone``, ``Preprocessing``, ``TextEncoder``), :mod:`.model_spec`
(``ModelSpec``), :mod:`.dataset_spec` (``DatasetSpec``, ``ClassSplit``) and :mod:`.hookspecs`
(the pluggy hooks). Imports only :mod:`fewtrans_board.core`; importing it does not import torch.
"""
