"""The similarity and curve arithmetic of :mod:`saliency_kit.evaluate`, kept under its old name;
it lives in :mod:`saliency_kit.evaluate.similarity`."""

from .evaluate.similarity import __all__, dilate, normalize_abs, points_at, spearman, ssim, trapezoid_auc  # noqa: F401
