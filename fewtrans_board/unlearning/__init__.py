"""The inductive-CLIP benchmark's core: SSD unlearning of CLIP and total knowledge loss.

These modules define benchmark models (an unlearned CLIP is scored against, never by, the
contestants), so they are core code, not plugin hooks:

- :mod:`.sets`: the paper's forget/retain/validation table and dataset templates;
- :mod:`.data`: a labelled dataset split streamed in batches;
- :mod:`.importance`: per-dataset diagonal Fisher importances with an on-disk cache;
- :mod:`.ssd`: selective synaptic dampening;
- :mod:`.zeroshot`: zero-shot accuracy with per-image correctness;
- :mod:`.record` / :mod:`.naming`: unlearning records and ``MODEL+unlearn:DATASET`` names;
- :mod:`.run`: the whole ``unlearn`` pipeline;
- :mod:`.strength`, :mod:`.targets`, :mod:`.probe`: searching the SSD strength for a
  knowledge-loss severity (``@tklN``) or the oracle (``@oracle``), measured on validation
  datasets or on episodes inside the forget dataset's train split;
- :mod:`.oracle`: the oracle check as a verdict (unlearned vs trained without, paired);
- :mod:`.tkl` and :mod:`.similarity`: total knowledge loss and its dataset weightings.

Importing this package does not import torch.
"""
