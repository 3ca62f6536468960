"""Draw ``docs/signed_grid.png``: the signed methods on the five example shapes, on a diverging map.

    PYTHONPATH=. python scripts/draw_signed_grid.py [--out docs/signed_grid.png]

Gradient × input, integrated gradients, LRP (the default composite) and DeepLIFT (baseline 0)
explain the shipped ``shapes`` model's top class on ``examples/shapes/*.png``. Every map is drawn
with ``sign="all"``: evidence for the class in red, against it in blue, each map scaled by its
99th percentile of |a|.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np
from PIL import Image

import saliency_kit as sk

SHAPES = ("circle", "square", "triangle", "star", "cross")
METHODS = ("gradient_x_input", "integrated_gradients", "lrp", "deeplift")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "signed_grid.png"))
    args = parser.parse_args(argv)

    model, spec = sk.load_model("shapes")
    images = np.stack(
        [np.asarray(Image.open(ROOT / "examples" / "shapes" / f"{name}.png").convert("RGB")) for name in SHAPES]
    )
    x = spec.preprocess(images)
    explanations = [sk.explain(model, x, method, targets="top1") for method in METHODS]
    figure = sk.render.grid(explanations, images, spec.class_names, sign="all", score_name="logit")
    sk.render.save_png(figure, args.out, dpi=110)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
