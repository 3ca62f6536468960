"""Every picture in the README and ``docs/``, declared once with the command that draws it and how
the tests check it.

    PYTHONPATH=. python scripts/pictures.py [--only NAME ...] [--out DIR] [--list]

redraws them (all, or the commands drawing each ``--only NAME``) into ``DIR`` (default ``docs``;
a temporary folder to compare before committing). Each command runs from the repository's root
as ``python ARGUMENTS`` with ``{out}`` replaced by ``DIR``, in ``ENVIRONMENT`` (TensorFlow, two
threads: the same pictures on any number of cores); pictures of one script that differ
only in ``--only NAME`` are drawn by one process. ``tests/test_pictures.py`` checks that every
picture the markdown shows is declared here and exists, and checks every one of them: it redraws
each by its command into a temporary folder and compares the pixels with the committed file,
except the two screenshots of a browser, whose pixels depend on the machine's fonts: for those it
runs the same command with ``--no-browser`` (everything but the screenshot) and checks what the
screenshot shows (``Picture.check`` says what).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIXELS = "redrawn by its command; its pixels match the committed file"
TEXT = "redrawn by its command; the same text as the committed file"
TRAINED = (
    f"{PIXELS} (the shapes CNN trained for 8 epochs: bit for bit only on the same CPU kernels and "
    "thread count; ENVIRONMENT fixes the threads, the kernels are the machine's: oneDNN's on an AVX-512 "
    "Xeon here, and with oneDNN off 16% of the pixels differ)"
)
#: the CPU kernels the TRAINED pictures were drawn with (:func:`kernels`): elsewhere a training's
#: float sums round differently, so the tests compare their size only there, saying so
TRAINED_ON = "x86_64 avx512f onednn"


def kernels() -> str:
    """The CPU kernels TensorFlow trains with here: the architecture, whether the CPU has
    AVX-512 (the widest vectors oneDNN and Eigen use), and whether oneDNN is on."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    except OSError:
        flags = []
    wide = "avx512f" if "avx512f" in flags else "no-avx512f"
    onednn = "no-onednn" if os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0" else "onednn"
    return f"{platform.machine()} {wide} {onednn}"


#: what every command runs in: Keras on TensorFlow (the pictures' backend), and two intra-op
#: threads whatever the machine's cores: a training's sums are split the same way on any of them
#: (on 4 threads the callback pictures come out 17% different)
ENVIRONMENT = {"KERAS_BACKEND": "tensorflow", "TF_NUM_INTRAOP_THREADS": "2", "TF_CPP_MIN_LOG_LEVEL": "3"}


@dataclass(frozen=True)
class Picture:
    """How one file of ``docs/`` is drawn: ``command`` (arguments of ``python``, ``{out}`` the
    folder it writes to), and how ``tests/test_pictures.py`` checks it: ``check`` is ``PIXELS``
    (redrawn by ``command`` and compared pixel by pixel) or ``TEXT`` (an HTML file: compared as
    text), or else says what the test checks of what the picture shows after running ``probe``
    (the same drawing code, without the screenshot)."""

    command: tuple[str, ...]
    check: str = PIXELS
    probe: tuple[str, ...] = ()


def _task(name: str) -> tuple[str, ...]:
    return ("scripts/draw_task_pictures.py", "--only", name, "--out", "{out}")


def _shapes(name: str) -> tuple[str, ...]:
    return ("scripts/draw_shapes_pictures.py", "--only", name, "--out", "{out}")


def _browser(name: str) -> tuple[str, ...]:
    return ("scripts/draw_browser_pictures.py", "--only", name, "--out", "{out}")


SEQUENCES = ("scripts/draw_sequences.py", "--out", "{out}")
CALLBACK = ("scripts/callback_demo.py", "--epochs", "8", "--pictures", "{out}")

#: file name in docs/ -> how it is drawn and checked
PICTURES: dict[str, Picture] = {
    "saliency_grid.png": Picture(_shapes("saliency_grid.png")),
    "signed_grid.png": Picture(("scripts/draw_signed_grid.py", "--out", "{out}/signed_grid.png")),
    "grid_layout.png": Picture(_shapes("grid_layout.png")),
    "evaluate_shapes.png": Picture(_shapes("evaluate_shapes.png")),
    "shapes_seg_grid.png": Picture(_task("shapes_seg_grid.png")),
    "shapes_seg_mask_grid.png": Picture(_task("shapes_seg_mask_grid.png")),
    "shapes_det_grid.png": Picture(_task("shapes_det_grid.png")),
    "time_series.png": Picture(SEQUENCES),
    "tokens.png": Picture(SEQUENCES),
    "tokens.html": Picture(SEQUENCES, check=TEXT),
    "sanity_example.png": Picture(
        ("scripts/measure_methods.py", "--figure-only", "--figure", "{out}/sanity_example.png")
    ),
    "callback_epoch1.png": Picture(CALLBACK, check=TRAINED),
    "callback_epoch8.png": Picture(CALLBACK, check=TRAINED),
    "callback_tensorboard.png": Picture(
        _browser("callback_tensorboard.png"),
        check="TensorBoard, serving the logs of the callback's run, lists one run with the one tag "
        "saliency/guided_backprop at steps 0-7, and its image at step 7 has the pixels of "
        "callback_epoch8.png drawn by the same run (the screenshot's pixels are not compared)",
        probe=(*_browser("callback_tensorboard.png"), "--no-browser"),
    ),
    "gallery.png": Picture(
        _browser("gallery.png"),
        check="the batch run's gallery data: the five shapes with the two methods, each image's two "
        "classes and their scores as the screenshot prints them, to 3 digits (its pixels are not compared)",
        probe=(*_browser("gallery.png"), "--no-browser"),
    ),
    "generation.png": Picture(("scripts/draw_generation.py", "--out", "{out}/generation.png")),
}


def commands(names: list[str] | None = None) -> list[tuple[str, ...]]:
    """The distinct commands drawing ``names`` (every picture when ``None``), in declaration order;
    commands that differ only in their ``--only NAME`` pairs are merged into one, drawing each
    ``NAME`` (one process: one start of the framework)."""
    chosen = PICTURES if names is None else {name: PICTURES[name] for name in names}
    merged: dict[tuple[str, ...], list[str] | None] = {}
    for picture in chosen.values():
        rest, only = _split_only(picture.command)
        known = merged.setdefault(rest, [])
        if known is None or not only:  # a command without --only draws every picture of its script
            merged[rest] = None
        else:
            known.extend(name for name in only if name not in known)
    return [
        (rest[0], *(part for name in only or () for part in ("--only", name)), *rest[1:])
        for rest, only in merged.items()
    ]


def command_drawing(name: str) -> tuple[str, ...]:
    """The command of ``commands()`` (all pictures, merged) that draws ``name``."""
    rest, _ = _split_only(PICTURES[name].command)
    return next(command for command in commands() if _split_only(command)[0] == rest)


def _split_only(command: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """``command`` without its ``--only NAME`` pairs, and each ``NAME`` they give."""
    rest: list[str] = []
    only: list[str] = []
    parts = iter(command)
    for part in parts:
        if part == "--only":
            only.append(next(parts))
        else:
            rest.append(part)
    return tuple(rest), only


def draw(command: tuple[str, ...], out: Path) -> None:
    """Run one declared ``command`` writing into ``out`` (in ``ENVIRONMENT``); ``CalledProcessError``
    if it fails."""
    arguments = [part.replace("{out}", str(out)) for part in command]
    print("$ python " + " ".join(arguments), flush=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), **ENVIRONMENT)
    subprocess.run([sys.executable, *arguments], cwd=ROOT, env=env, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(PICTURES), help="redraw this picture only")
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="the folder to draw into")
    parser.add_argument("--list", action="store_true", help="list the pictures and their commands")
    args = parser.parse_args(argv)
    if args.list:
        for name, picture in PICTURES.items():
            print(f"{name:<26} python {' '.join(picture.command)}")
            print(f"{'':<26} checked: {picture.check}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for command in commands(args.only):
        draw(command, args.out.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
