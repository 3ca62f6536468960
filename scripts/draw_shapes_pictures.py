"""Draw the docs' pictures of the shipped ``shapes`` model on ``examples/shapes/*.png``.

    PYTHONPATH=. python scripts/draw_shapes_pictures.py [--out docs] [--only NAME]

- ``saliency_grid.png``: guided backprop, SmoothGrad (seed 0), integrated gradients and Grad-CAM of
  each example's top class, one row per shape (``sk.render.grid``, dpi 150);
- ``grid_layout.png``: the grid ``saliency explain examples/shapes/cross.png --method guided_backprop
  --method integrated_gradients --method gradcam --target top3`` writes;
- ``evaluate_shapes.png``: the ``metrics.png`` of ``saliency evaluate examples/shapes/*.png --method
  gradient --method guided_backprop --method integrated_gradients --method gradcam`` (default metrics,
  seed 0; a few minutes).

``scripts/pictures.py`` declares these pictures with this command.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = ("circle", "square", "triangle", "star", "cross")
GRID_METHODS = ("guided_backprop", "smoothgrad", "integrated_gradients", "gradcam")
FOUR_METHODS = ("gradient", "guided_backprop", "integrated_gradients", "gradcam")


def saliency_grid(path: Path) -> None:
    import numpy as np
    from PIL import Image

    import saliency_kit as sk

    model, spec = sk.load_model("shapes")
    files = [ROOT / "examples" / "shapes" / f"{name}.png" for name in SHAPES]
    images = np.stack([np.asarray(Image.open(file).convert("RGB")) for file in files])
    x = spec.preprocess(images)
    options = {"smoothgrad": {"seed": 0}}
    explanations = [sk.explain(model, x, method, "top1", **options.get(method, {})) for method in GRID_METHODS]
    figure = sk.render.grid(explanations, images, spec.class_names, score_name="logit")
    sk.render.save_png(figure, path, dpi=150)


def cli(arguments: list[str], produced: str, path: Path) -> None:
    """Run ``saliency ARGUMENTS --out TMP`` and copy the file ``produced`` (a glob in TMP) to ``path``.
    The command line runs in this process (its ``main``, as the console script calls it): one
    start of TensorFlow for every picture."""
    from saliency_kit.cli.main import main

    with tempfile.TemporaryDirectory() as out:
        print("$ saliency " + " ".join(arguments), flush=True)
        with contextlib.redirect_stdout(io.StringIO()):
            status = main([*arguments, "--out", out])
        if status != 0:
            raise SystemExit(f"the command failed ({status}); its error is above")
        shutil.copyfile(next(Path(out).glob(produced)), path)


def grid_layout(path: Path) -> None:
    methods = [a for m in ("guided_backprop", "integrated_gradients", "gradcam") for a in ("--method", m)]
    cli(["explain", "examples/shapes/cross.png", *methods, "--target", "top3"], "*/grid.png", path)


def evaluate_shapes(path: Path) -> None:
    images = [f"examples/shapes/{name}.png" for name in SHAPES]
    methods = [a for m in FOUR_METHODS for a in ("--method", m)]
    cli(["evaluate", *images, *methods, "--seed", "0"], "metrics.png", path)


PICTURES = {
    "saliency_grid.png": saliency_grid,
    "grid_layout.png": grid_layout,
    "evaluate_shapes.png": evaluate_shapes,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="the folder to write the pictures to")
    parser.add_argument("--only", action="append", choices=sorted(PICTURES), help="draw this picture only")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, draw in PICTURES.items():
        if args.only is None or name in args.only:
            draw(args.out / name)
            print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
