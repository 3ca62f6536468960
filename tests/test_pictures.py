"""Every picture the README and the pages under ``docs/`` show is declared in ``scripts/pictures.py`` with the
command that draws it, exists, and is checked here, so none can go stale: each is redrawn by its
declared command into a temporary folder (the pictures of one script by one process) and must
match the committed file, pixel by pixel (an HTML file: as text). The two screenshots of a browser,
whose pixels depend on the machine's fonts, are checked by what they show instead: their script
runs with ``--no-browser`` (everything but the screenshot) and the gallery's images, methods,
classes and scores, and TensorBoard's images, must be those of the committed screenshot. The
shapes CNN of the callback pictures is trained once: TensorBoard is shown the logs of the run that
drew them (the run the screenshot's script makes itself: ``callback_demo.py --epochs 8``).
About 175 s of CPU time, most of it on 2 cores at once (a third of it the callback's training)."""

import importlib.util
import json
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _pictures_module():
    spec = importlib.util.spec_from_file_location("pictures", ROOT / "scripts" / "pictures.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["pictures"] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


pictures = _pictures_module()
EXTENSIONS = r"\.(?:png|html|jpe?g|gif|svg)"
NAMED = re.compile(r"docs/([\w.-]+" + EXTENSIONS + ")")  # docs/NAME anywhere: a link or a path in text
LINKED = re.compile(r"\]\(((?:\.\./)*[\w.-]+" + EXTENSIONS + r")\)")  # a relative link: ](NAME), ](../NAME)


def _shown() -> set:
    """The files of ``docs/`` the markdown shows or names: ``docs/NAME`` in the README and in
    the pages under ``docs/``, and the links of those pages that lead to ``docs/NAME`` (``](NAME)``
    beside it, ``](../NAME)`` from ``docs/guide/``)."""
    found = set(NAMED.findall((ROOT / "README.md").read_text(encoding="utf-8")))
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        linked = {(page.parent / target).resolve() for target in LINKED.findall(text)}
        found |= set(NAMED.findall(text)) | {path.name for path in linked if path.parent == DOCS.resolve()}
    return found


def test_every_picture_the_markdown_shows_is_declared_with_its_command_and_exists():
    shown = _shown()
    assert {"shapes_det_grid.png", "tokens.html", "gallery.png"} <= shown  # the parsing finds them
    assert shown <= set(pictures.PICTURES), sorted(shown - set(pictures.PICTURES))
    on_disk = {path.name for path in DOCS.iterdir() if path.suffix in (".png", ".html")}
    assert set(pictures.PICTURES) == on_disk
    for name, picture in pictures.PICTURES.items():
        script = ROOT / picture.command[0]
        assert script.is_file(), (name, picture.command)
        flags = [part for part in picture.command + picture.probe if part.startswith("--")]
        assert all(flag in script.read_text(encoding="utf-8") for flag in flags), (name, flags)
        assert any("{out}" in part for part in picture.command), name  # it can draw elsewhere
        compared = pictures.TEXT if name.endswith(".html") else pictures.PIXELS
        assert picture.check.startswith(compared) != bool(picture.probe), f"{name}: compared, or probed and said how"
    assert set(PROBED) == {name for name, picture in pictures.PICTURES.items() if picture.probe}


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGBA"), np.int16)


COMPARED = [name for name, picture in pictures.PICTURES.items() if not picture.probe]
CALLBACK_RUN = ("--out", "{out}/callback_run")  # keeps the run's logs; the pictures are the same


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """``drawn(command)``: the folder ``command`` has drawn into (run once per module, the
    pictures of one script merged into one command by ``pictures.commands``)."""
    out = tmp_path_factory.mktemp("pictures")
    done = set()

    def draw(command: tuple) -> Path:
        if command not in done:
            pictures.draw(command + CALLBACK_RUN if command == pictures.CALLBACK else command, out)
            done.add(command)
        return out

    return draw


@pytest.mark.parametrize("name", COMPARED)
def test_a_picture_redrawn_by_its_command_matches_the_committed_one(name, drawn):
    """Same size, and every pixel within 8 of 255 but in at most 0.2% of them (text antialiasing)."""
    out = drawn(pictures.command_drawing(name))
    picture = pictures.PICTURES[name]
    command = shlex.join(["python", "scripts/pictures.py", "--only", name])
    if picture.check not in (pictures.PIXELS, pictures.TEXT):
        command += f"; checked: {picture.check}"
    if name.endswith(".html"):
        same = (out / name).read_text(encoding="utf-8") == (DOCS / name).read_text(encoding="utf-8")
        assert same, f"docs/{name} is stale: redraw it with {command}"
        return
    new, old = _pixels(out / name), _pixels(DOCS / name)
    assert new.shape == old.shape, f"docs/{name} is stale: redraw it with {command}"
    if picture.check == pictures.TRAINED and pictures.kernels() != pictures.TRAINED_ON:
        pytest.skip(
            f"docs/{name} comes from a training, drawn on {pictures.TRAINED_ON!r} kernels; these are "
            f"{pictures.kernels()!r}: its size matches, its pixels are compared there only"
        )
    off = np.abs(new - old).max(axis=-1) > 8
    assert off.mean() <= 0.002, f"docs/{name} is stale ({off.mean():.1%} of pixels differ): redraw it with {command}"


#: what docs/gallery.png shows of each card: the image, then per method its two classes and
#: their scores as the page prints them (3 significant digits)
GALLERY_CARDS = {
    "cross.png": [("cross", 17.5), ("star", -4.88)],
    "circle.png": [("circle", 17.3), ("square", 7.59)],
    "triangle.png": [("triangle", 6.96), ("square", -1.25)],
    "star.png": [("star", 5.91), ("triangle", 1.37)],
    "square.png": [("square", 5.51), ("triangle", -6.60)],
}


def _check_gallery(out: Path) -> None:
    """The batch run behind docs/gallery.png holds the cards the screenshot shows."""
    from saliency_kit.batch.gallery import gallery_data

    run = out / "gallery"
    data = gallery_data(run)
    assert [method["title"] for method in data["methods"]] == ["Guided Backprop", "Grad-CAM"]
    assert (data["failed"], data["missing"]) == ([], 0)
    cards = {}
    for image in data["images"]:
        for method in ("guided_backprop", "gradcam"):
            shown = [(o["class_name"], float(f"{o['score']:.3g}")) for o in image["outputs"] if o["method"] == method]
            assert shown == GALLERY_CARDS[image["image"]], (image["image"], method, shown)
            assert all((run / o["overlay"]).is_file() for o in image["outputs"])
        cards[image["image"]] = len(image["outputs"])
    assert cards == dict.fromkeys(GALLERY_CARDS, 4)
    assert "<title>Saliency maps: out</title>" in (run / "index.html").read_text(encoding="utf-8")


def _check_tensorboard(out: Path) -> None:
    """TensorBoard lists what docs/callback_tensorboard.png shows: one run, one tag, eight steps,
    and the grid of the last epoch."""
    shown = json.loads((out / "callback_tensorboard" / "images.json").read_text(encoding="utf-8"))
    assert {run: {tag: listed["steps"] for tag, listed in tags.items()} for run, tags in shown.items()} == {
        ".": {"saliency/guided_backprop": list(range(8))}
    }
    last = _pixels(out / "callback_tensorboard" / shown["."]["saliency/guided_backprop"]["last"])
    np.testing.assert_array_equal(last, _pixels(out / "callback_epoch8.png"))  # compared with docs/ above


PROBED = {"gallery.png": _check_gallery, "callback_tensorboard.png": _check_tensorboard}


@pytest.mark.parametrize("name", sorted(PROBED))
def test_a_screenshot_shows_what_its_script_serves_to_the_browser(name, drawn):
    picture = pictures.PICTURES[name]
    probe = picture.probe
    if name == "callback_tensorboard.png":  # the logs of the run that drew callback_epoch*.png
        probe += ("--logs", str(drawn(pictures.command_drawing("callback_epoch8.png")) / "callback_run" / "logs"))
    PROBED[name](drawn(probe))
