"""Attribution methods, one small module per family, all running on :mod:`saliency_kit.engine`."""
