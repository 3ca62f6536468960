"""The built-in methods, imported in this order (the order of ``names()`` and ``saliency methods``)."""
from . import gradient, integrated_gradients, smoothgrad, gradcam, occlusion, lrp, deeplift  # noqa: F401,I001
from . import smoothgrad_variants, expected_gradients, blur_ig, guided_ig, xrai  # noqa: F401,I001
from . import scorecam, layercam, rise  # noqa: F401,I001

#: The built-in methods in the order of ``names()``, whichever module happens to be imported first.
ORDER = (
    "gradient", "gradient_x_input", "guided_backprop", "deconvnet", "integrated_gradients", "smoothgrad",
    "gradcam", "gradcam_plus_plus", "guided_gradcam", "occlusion", "lrp", "deeplift", "squaregrad", "vargrad",
    "expected_gradients", "blur_ig", "guided_ig", "xrai", "scorecam", "layercam", "rise",
)
