"""The explain pipeline: from a question (a model, its inputs, a method, what to explain) to an
:class:`~saliency_kit.explanation.Explanation`.

* :mod:`.api` — ``explain`` and ``jacobian``, the pre-flight ``check`` the command line shares;
* :mod:`.request` — what every driver shares: targets resolved once, the options recorded, the
  arguments of one call (``ExplainCall``), noise keys;
* :mod:`.parts` — a request that is not one float input, read into the parts it explains;
* :mod:`.explain_parts` — the driver of several inputs, token ids and inner layers.

``sk.explain`` and ``sk.jacobian`` are the public names; this package imports no TensorFlow until
they run.
"""
