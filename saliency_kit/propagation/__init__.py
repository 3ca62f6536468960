"""Relevance propagation: LRP and DeepLIFT as backward rules on a copy of the model.

One role per module:

* :mod:`.rules` — the LRP rules for linear layers (:class:`~.rules.Epsilon`, ``Gamma``, ``ZPlus``,
  ``AlphaBeta``, ``Flat``, ``WSquare``, ``ZBox``) and ``Pass`` for activations;
* :mod:`.composites` — which rule each layer gets (:class:`~.composites.Composite` and the named,
  registered composites);
* :mod:`.canonizers` — graph facts and the BatchNormalization merge applied to the copy first;
* :mod:`.lrp` — the LRP rewrite (``rewrite_lrp``);
* :mod:`.deeplift` — the DeepLIFT Rescale rewrite (``rewrite_deeplift``).
"""
