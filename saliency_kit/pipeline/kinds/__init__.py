"""Input kinds: how an integer model input is explained, declared once.

A model's float inputs are explained as themselves, and an inner layer (``attribute_to=LAYER``)
at its output; an integer input has no gradient of its own, so it is explained at the output of
the layer that reads it, when a declared :class:`IdsKind` recognises that layer: token ids at
their ``Embedding``'s output (:mod:`.token_ids`). A kind says which layer it reads through
(``reads``), the ids that layer takes (``vocabulary``) and the label :attr:`Explanation.parts`
gives its parts; the rest is shared: the values are the layer's output for the ids (read
again inside the compiled kernel, so a path or a noise draw moves them in that space), a
baseline or an occlusion value given as one id is that id's output, and a part's map sums its
last axis (averages it for methods whose maps are means).

:func:`register` adds a kind (a package's own, or a test's); :func:`kinds` lists them; every
list of them (the defaults :func:`reader` chooses, the labels) comes from that declaration.
"""

from __future__ import annotations

from . import token_ids  # noqa: F401  (the built-in kinds declare themselves)
from .base import HELD_BY_NAME, IdsKind, explained_by_default, kind_of, kinds, reader, register, unregister

__all__ = ["IdsKind", "register", "unregister", "kinds", "kind_of", "reader", "explained_by_default", "HELD_BY_NAME"]
