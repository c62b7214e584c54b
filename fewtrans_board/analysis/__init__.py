"""The papers' analyses, computed from stored runs and models (``fewtrans-board analyze``).

One module per analysis, each returning a JSON-friendly report and an inline SVG; its
docstring names the paper's figure or table: :mod:`.sensitivity`, :mod:`.delta_w`,
:mod:`.cka`, :mod:`.zipf`, :mod:`.sweep`, :mod:`.cross_validation`, :mod:`.grid_spacing`,
:mod:`.model_selection`. :mod:`.refit` re-fits a stored run's adapter on sampled episodes
(same seeds, so the same adapted weights) for the two analyses that need adapted models;
:mod:`.report` writes the JSON and SVG files (:data:`.report.ANALYSES` lists every name).
"""
