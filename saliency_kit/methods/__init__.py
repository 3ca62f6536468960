"""Attribution methods: one module per method (or tight family), each reading as its formula.

.. table generated from the registry by ``python scripts/method_tables.py --write``

=======================  ===============================  =============================
method                   module                           map
=======================  ===============================  =============================
gradient                 :mod:`.gradient`                 max |a| over the last axis
gradient_x_input         :mod:`.gradient`                 sum over the last axis
guided_backprop          :mod:`.gradient`                 max |a| over the last axis
deconvnet                :mod:`.gradient`                 max |a| over the last axis
integrated_gradients     :mod:`.integrated_gradients`     sum over the last axis
smoothgrad               :mod:`.smoothgrad`               as the base method
squaregrad               :mod:`.smoothgrad`               as the base method
vargrad                  :mod:`.smoothgrad`               as the base method
gradcam                  :mod:`.gradcam`                  the attributions are the maps
gradcam_plus_plus        :mod:`.gradcam`                  the attributions are the maps
guided_gradcam           :mod:`.gradcam`                  max |a| over the last axis
occlusion                :mod:`.occlusion`                mean over the last axis
lrp                      :mod:`.lrp`                      sum over the last axis
deeplift                 :mod:`.deeplift`                 sum over the last axis
expected_gradients       :mod:`.expected_gradients`       sum over the last axis
blur_ig                  :mod:`.blur_ig`                  sum over the last axis
guided_ig                :mod:`.guided_ig`                sum over the last axis
xrai                     :mod:`.xrai`                     the attributions are the maps
scorecam                 :mod:`.scorecam`                 the attributions are the maps
layercam                 :mod:`.layercam`                 the attributions are the maps
rise                     :mod:`.rise`                     the attributions are the maps
conductance              :mod:`.conductance`              sum over the last axis
attention_rollout        :mod:`.attention_rollout`        the attributions are the maps
transformer_attribution  :mod:`.transformer_attribution`  the attributions are the maps
=======================  ===============================  =============================

A method is declared with :func:`register` (see :mod:`.base`); methods from outside the package
register the same way (and :func:`unregister` removes them again), or through the entry-point
group ``saliency_kit.methods``. The built-in modules are imported here, after :mod:`.base`, in
the order of ``names()``; importing them does not import TensorFlow or Keras.
"""

from __future__ import annotations

from .base import (
    ENTRY_POINT_GROUP,
    RESERVED_OPTION_NAMES,
    Method,
    Option,
    Request,
    builtins,
    describe,
    get,
    names,
    register,
    titles,
    unregister,
)
from .reduce import reduce_map

# the built-in methods, registered in this order (the order of names() and `saliency methods`);
# the import sorter leaves this block alone because its order is the registry's order
# isort: off
from . import gradient, integrated_gradients, smoothgrad, gradcam, occlusion, lrp, deeplift  # noqa: E402,F401
from . import expected_gradients, blur_ig, guided_ig, xrai, scorecam, layercam, rise  # noqa: E402,F401
from . import conductance, attention_rollout, transformer_attribution  # noqa: E402,F401
# isort: on

__all__ = [
    "ENTRY_POINT_GROUP",
    "RESERVED_OPTION_NAMES",
    "Method",
    "Option",
    "Request",
    "builtins",
    "describe",
    "get",
    "names",
    "reduce_map",
    "register",
    "titles",
    "unregister",
]
