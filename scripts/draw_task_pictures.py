"""The docs' pictures of the shipped segmentation model and detector, made by the commands the
docs show, and the example scenes those commands read.

    .venv/bin/python scripts/draw_task_pictures.py [--out docs] [--examples]   # ~30 s on 2 CPU cores

With ``--examples``, first writes ``examples/scenes/`` (three scenes of seed 5 -- one shape of each
kind at least across them, unseen in training -- and ``star_mask.png``, the star of the first
one; the same files each time). Then runs::

    saliency explain examples/scenes/scene1.png --model shapes_seg --method gradient --method gradcam
    saliency explain examples/scenes/scene1.png --model shapes_seg --method gradient \
        --target star@examples/scenes/star_mask.png
    saliency explain examples/scenes/scene1.png --model shapes_det --method gradient --method gradcam

and copies each run's ``grid.png`` to ``OUT/shapes_seg_grid.png``, ``OUT/shapes_seg_mask_grid.png``
and ``OUT/shapes_det_grid.png`` (``OUT``: ``--out``, default ``docs``); prints each command's output.
``scripts/pictures.py`` declares these pictures with this command.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from saliency_kit.data import scenes  # noqa: E402

EXAMPLE_SEED = 5
EXAMPLES = ROOT / "examples" / "scenes"
DOCS = ROOT / "docs"
SCENE = "examples/scenes/scene1.png"


def write_examples() -> None:
    """The first scenes of seed 5 with three shapes of three kinds, as ``scene1.png``..``scene3.png``,
    and the star of ``scene1.png`` as ``star_mask.png`` (white = in)."""
    EXAMPLES.mkdir(parents=True, exist_ok=True)
    data = scenes.make_scenes(200, seed=EXAMPLE_SEED)
    star = scenes.SEGMENTATION_CLASSES.index("star")
    chosen = [
        i
        for i in range(len(data.counts))
        if data.counts[i] == 3 and len(set(data.labels[i])) == 3 and star - 1 in data.labels[i]
    ][:3]
    for n, i in enumerate(chosen, start=1):
        Image.fromarray(data.images[i]).save(EXAMPLES / f"scene{n}.png")
        print(f"wrote {EXAMPLES / f'scene{n}.png'} (scene {i} of seed {EXAMPLE_SEED})")
    mask = data.label_maps[chosen[0]] == star
    Image.fromarray(mask.astype(np.uint8) * 255).save(EXAMPLES / "star_mask.png")
    print(f"wrote {EXAMPLES / 'star_mask.png'}")


def explain(arguments: list[str], picture: Path) -> None:
    """Run ``saliency explain ARGUMENTS`` into a temporary folder and copy its grid to ``picture``.
    The command line runs in this process (its ``main``, as the console script calls it): one
    start of TensorFlow for every picture."""
    from saliency_kit.cli.main import main

    with tempfile.TemporaryDirectory() as out:
        print("$ saliency explain " + " ".join(arguments), flush=True)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            status = main(["explain", *arguments, "--out", out])
        print(printed.getvalue().replace(out, "saliency_out"), end="")
        if status != 0:
            raise SystemExit(f"the command failed ({status}); its error is above")
        grid = next(Path(out).glob("*/grid.png"))
        shutil.copyfile(grid, picture)
        print(f"copied its grid to {picture}")


#: each picture and the ``saliency explain`` arguments whose grid it is
PICTURES = {
    "shapes_seg_grid.png": [SCENE, "--model", "shapes_seg", "--method", "gradient", "--method", "gradcam"],
    "shapes_seg_mask_grid.png": [
        *(SCENE, "--model", "shapes_seg", "--method", "gradient"),
        *("--target", "star@examples/scenes/star_mask.png"),
    ],
    "shapes_det_grid.png": [SCENE, "--model", "shapes_det", "--method", "gradient", "--method", "gradcam"],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DOCS, help="the folder to write the pictures to")
    parser.add_argument("--examples", action="store_true", help="write examples/scenes/ first")
    parser.add_argument("--only", action="append", choices=sorted(PICTURES), help="draw this picture only")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.examples:
        write_examples()
    for picture, arguments in PICTURES.items():
        if args.only is None or picture in args.only:
            explain(arguments, args.out / picture)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
