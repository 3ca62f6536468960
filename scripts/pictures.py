"""Every picture in the README and ``docs/``, declared once with the command that draws it.

    PYTHONPATH=. python scripts/pictures.py [--only NAME ...] [--out DIR] [--list]

redraws them (all, or the commands drawing each ``--only NAME``) into ``DIR`` (default ``docs``;
a temporary folder to compare before committing). Each command runs from the repository's root
as ``python ARGUMENTS`` with ``{out}`` replaced by ``DIR``. ``tests/test_pictures.py`` checks that
every picture the markdown shows is declared here and exists, and redraws the ``cheap`` ones
into a temporary folder, comparing them with the committed files; the others (training, a
browser, many metrics) are redrawn by hand with this script.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Picture:
    """How one file of ``docs/`` is drawn: ``command`` (arguments of ``python``, ``{out}`` the
    folder it writes to), whether the tests redraw it (``cheap``: under a minute with the other
    cheap ones on 2 CPU cores, deterministic), and otherwise why not (``dear``)."""

    command: tuple[str, ...]
    cheap: bool = False
    dear: str = ""


def _task(name: str) -> tuple[str, ...]:
    return ("scripts/draw_task_pictures.py", "--only", name, "--out", "{out}")


def _shapes(name: str) -> tuple[str, ...]:
    return ("scripts/draw_shapes_pictures.py", "--only", name, "--out", "{out}")


def _browser(name: str) -> tuple[str, ...]:
    return ("scripts/draw_browser_pictures.py", "--only", name, "--out", "{out}")


SEQUENCES = ("scripts/draw_sequences.py", "--out", "{out}")
CALLBACK = ("scripts/callback_demo.py", "--epochs", "8", "--pictures", "{out}")
BUDGET = "about 20 s: the tests' minute goes to the cheap ones"

#: file name in docs/ -> how it is drawn
PICTURES: dict[str, Picture] = {
    "saliency_grid.png": Picture(_shapes("saliency_grid.png"), dear=BUDGET),
    "signed_grid.png": Picture(("scripts/draw_signed_grid.py", "--out", "{out}/signed_grid.png"), cheap=True),
    "grid_layout.png": Picture(_shapes("grid_layout.png"), dear=BUDGET),
    "evaluate_shapes.png": Picture(_shapes("evaluate_shapes.png"), dear="every default metric on five images"),
    "shapes_seg_grid.png": Picture(_task("shapes_seg_grid.png"), dear=BUDGET),
    "shapes_seg_mask_grid.png": Picture(_task("shapes_seg_mask_grid.png"), dear=BUDGET),
    "shapes_det_grid.png": Picture(_task("shapes_det_grid.png"), cheap=True),
    "time_series.png": Picture(SEQUENCES, dear="trains two small models"),
    "tokens.png": Picture(SEQUENCES, dear="trains two small models"),
    "tokens.html": Picture(SEQUENCES, dear="trains two small models"),
    "sanity_example.png": Picture(
        ("scripts/measure_methods.py", "--figure-only", "--figure", "{out}/sanity_example.png"),
        cheap=True,
    ),
    "callback_epoch1.png": Picture(CALLBACK, dear="trains the shapes CNN for 8 epochs"),
    "callback_epoch8.png": Picture(CALLBACK, dear="trains the shapes CNN for 8 epochs"),
    "callback_tensorboard.png": Picture(
        _browser("callback_tensorboard.png"), dear="trains the shapes CNN; TensorBoard in headless Chromium"
    ),
    "gallery.png": Picture(_browser("gallery.png"), dear="headless Chromium"),
    "generation.png": Picture(
        ("scripts/draw_generation.py", "--out", "{out}/generation.png"), dear="trains a small language model"
    ),
}


def commands(names: list[str] | None = None) -> list[tuple[str, ...]]:
    """The distinct commands drawing ``names`` (every picture when ``None``), in declaration order."""
    chosen = PICTURES if names is None else {name: PICTURES[name] for name in names}
    return list(dict.fromkeys(picture.command for picture in chosen.values()))


def draw(command: tuple[str, ...], out: Path) -> None:
    """Run one declared ``command`` writing into ``out``; ``CalledProcessError`` if it fails."""
    arguments = [part.replace("{out}", str(out)) for part in command]
    print("$ python " + " ".join(arguments), flush=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, *arguments], cwd=ROOT, env=env, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(PICTURES), help="redraw this picture only")
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="the folder to draw into")
    parser.add_argument("--list", action="store_true", help="list the pictures and their commands")
    args = parser.parse_args(argv)
    if args.list:
        for name, picture in PICTURES.items():
            cost = "cheap" if picture.cheap else picture.dear or "-"
            print(f"{name:<26} {cost:<40} python {' '.join(picture.command)}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for command in commands(args.only):
        draw(command, args.out.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
