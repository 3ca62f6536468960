"""Relevance propagation: LRP and DeepLIFT as backward rules on a copy of the model.

One role per module (Zennit's layering):

* :mod:`.core` — the mechanism: linear parts of layers and the rule mechanism (``LinearRule``,
  ``Branch``);
* :mod:`.gates` — the ``custom_gradient`` gates that put the rules on a backward pass (LRP's rule
  and pass gates, DeepLIFT's Rescale and max-pooling gates and their row layouts);
* :mod:`.rewriting` — the pass that puts rule-carrying layers into a checked copy of the model;
* :mod:`.lrp_rules` — the LRP rules for linear layers (``Epsilon``, ``Gamma``, ``ZPlus``,
  ``AlphaBeta``, ``Flat``, ``WSquare``, ``ZBox``) and ``Pass`` for activations;
* :mod:`.composites` — which rule each layer gets (``Composite`` and the named composites, in a
  registry that imports no TensorFlow);
* :mod:`.canonizers` — graph facts and the BatchNormalization merge applied to the copy first;
* :mod:`.lrp` — the LRP rewrite (``rewrite_lrp``);
* :mod:`.deeplift` — the DeepLIFT Rescale rewrite (``rewrite_deeplift``).

``Composite`` and ``DeepLiftRewrite`` both have ``rewrite_model(model)``: that protocol is all
:func:`saliency_kit.rewrite` knows of them.
"""
