"""The papers' analyses, computed from stored runs and models (``fewtrans-board analyze``).

One module per analysis, each returning a JSON-friendly report and an inline SVG:

- :mod:`.sensitivity`: hyperparameter sensitivity vs HPE penalty across runs (FewTrans Fig. 4).
- :mod:`.delta_w`: L2 norm of ``W_adapted - W_initial`` per block (FewTrans Fig. 5, left).
- :mod:`.cka`: linear CKA of pretrained vs adapted features per layer (FewTrans Fig. 5, right).
- :mod:`.zipf`: adjusted Zipf frequency of class names vs CLIP adaptation gain (FewTrans Fig. 6).

:mod:`.refit` re-fits a stored run's adapter on sampled episodes (same seeds, so the same
adapted weights) for the two analyses that need adapted models; :mod:`.report` writes the
JSON and SVG files.
"""
