"""Everything that looks into, copies or rewrites a user's Keras model.

* :mod:`.walker` — the one layer walker (paths ``"outer/inner"``, owners, wrappers).
* :mod:`.keras_private` — every use of Keras-private API, each commented.
* :mod:`.scores` — :class:`ScoreView`: logits behind a final softmax/sigmoid, taps on inner layers.
* :mod:`.copy` — one checked copier (state beyond variables included).
* :mod:`.override` — op-level backward rules for ReLU-family ops (``relu_rule``).
* :mod:`.rewrite` — ``rewrite(model, rule)`` on every kind of model.

Submodules are imported on use; importing this package imports nothing else.
"""
