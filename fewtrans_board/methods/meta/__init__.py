"""Episodic meta-learning for BSCD-FSL: ProtoNet, MatchingNet, RelationNet, MetaOpt, MAML.

``fewtrans-board meta-train`` trains a backbone on 5-way episodes of a source dataset
(:mod:`fewtrans_board.metatrain`, with the optional feature-wise transformation of
:mod:`.fwt`) and writes a safetensors checkpoint (:mod:`.checkpoint`). The ``meta-trained``
model loads it as an ordinary backbone (:mod:`.model`) and the adapters of :mod:`.adapters`
apply each method's test-time rule, so ``fewtrans-board evaluate --model meta-trained
--weights CKPT --adapter protonet`` scores it like any other model + adapter pair.
:mod:`.methods` lists the methods: the papers' versions under the plain names, and the
simplified variants (``matchingnet-nofce``, ``relationnet-mlp``, ``metaopt-ridge``,
``proto-maml``) named as such. :mod:`.heads` holds the differentiable episode heads,
:mod:`.svm` MetaOptNet's Crammer-Singer SVM, :mod:`.features` the feature maps RelationNet
compares and :mod:`.maml` MAML's inner loop, which meta-training and the adapters share.
"""
