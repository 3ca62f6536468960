"""Attribution methods: one module per method (or tight family), each reading as its formula.

=====================  ==============================  ======================================
method                 module                          map (reduction of the last axis)
=====================  ==============================  ======================================
gradient               :mod:`.gradient`                max |a|
gradient_x_input       :mod:`.gradient`                sum
guided_backprop        :mod:`.gradient`                max |a|
deconvnet              :mod:`.gradient`                max |a|
integrated_gradients   :mod:`.integrated_gradients`    sum
smoothgrad             :mod:`.smoothgrad`              as its base method
gradcam                :mod:`.gradcam`                 the CAM itself
gradcam_plus_plus      :mod:`.gradcam`                 the CAM itself
guided_gradcam         :mod:`.gradcam`                 max |a|
occlusion              :mod:`.occlusion`               mean
squaregrad, vargrad    :mod:`.smoothgrad_variants`     as its base method
expected_gradients     :mod:`.expected_gradients`      sum
blur_ig                :mod:`.blur_ig`                 sum
guided_ig              :mod:`.guided_ig`               sum
xrai                   :mod:`.xrai`                    the region-gain map itself
scorecam               :mod:`.scorecam`                the CAM itself
layercam               :mod:`.layercam`                the CAM itself
rise                   :mod:`.rise`                    the saliency itself
=====================  ==============================  ======================================

A method is declared with :func:`register` (see :mod:`.base`); methods from outside the package
register the same way (and :func:`unregister` removes them again), or through the entry-point group ``saliency_kit.methods``. Importing this
package does not import TensorFlow or Keras: the built-in modules are imported (in the order
above) the first time the registry is read.
"""
from __future__ import annotations

from .base import (
    ENTRY_POINT_GROUP,
    RESERVED_OPTION_NAMES,
    Method,
    Option,
    Request,
    describe,
    get,
    names,
    register,
    titles,
    unregister,
)
from .reduce import reduce_map

__all__ = [
    "ENTRY_POINT_GROUP",
    "RESERVED_OPTION_NAMES",
    "Method",
    "Option",
    "Request",
    "describe",
    "get",
    "names",
    "reduce_map",
    "register",
    "titles",
    "unregister",
]
