"""The papers' analyses, computed from stored runs and models (``fewtrans-board analyze``).

One module per analysis, each returning a JSON-friendly report and an inline SVG:

- :mod:`.sensitivity`: hyperparameter sensitivity vs HPE penalty across runs (FewTrans Fig. 4).
- :mod:`.delta_w`: L2 norm of ``W_adapted - W_initial`` per block (FewTrans Fig. 5, left) and
  the per-element mean ``|Δθ|/|θ|`` per layer (BSCD-FSL Fig. 2).
- :mod:`.cka`: linear CKA of pretrained vs adapted features per layer (FewTrans Fig. 5, right).
- :mod:`.zipf`: adjusted Zipf frequency of class names vs CLIP adaptation gain (FewTrans Fig. 6).
- :mod:`.sweep`: per-episode best and per-configuration accuracy of a sweep (FewTrans Tab. I,
  Fig. 2); :mod:`.cross_validation`: support-set CV vs the average-optimal configuration
  (FewTrans Fig. 3); :mod:`.grid_spacing`: HPE accuracy per grid spacing (FewTrans Fig. 4).
- :mod:`.model_selection`: how often IMS-f selects each source model and layer, per dataset
  (BSCD-FSL Fig. 3), from the selections stored with its runs.

:mod:`.refit` re-fits a stored run's adapter on sampled episodes (same seeds, so the same
adapted weights) for the two analyses that need adapted models; :mod:`.report` writes the
JSON and SVG files (:data:`.report.ANALYSES` lists every name).
"""
