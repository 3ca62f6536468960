"""The explain pipeline: from a question (a model, its inputs, a method, what to explain) to an
:class:`~saliency_kit.explanation.Explanation`, on one road:

* :mod:`.api` — ``explain`` and ``jacobian``, the pre-flight ``check`` the command line shares;
* :mod:`.request` — the arguments of one call (``ExplainCall``), targets resolved once with the
  forward pass they need, the options recorded, noise keys;
* :mod:`.parts` — what a call explains: the model's one float input (a space of one part),
  several inputs, token ids at their ``Embedding``'s output, inner layers;
* :mod:`.layer_start` — where an inner layer's path starts;
* :mod:`.prepare` — the prepare step: a call checked and laid out as the engine's jobs;
* :mod:`.results` — the jobs run and their results made an Explanation.

``sk.explain`` and ``sk.jacobian`` are the public names; this package imports no TensorFlow until
they run.
"""
