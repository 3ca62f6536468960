"""Every picture the README and ``docs/*.md`` show is declared in ``scripts/pictures.py`` with the
command that draws it, and exists; the cheap ones are redrawn here by their declared command and
must match the committed files, so a picture cannot go stale while its command changes."""

import importlib.util
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
LINKED = re.compile(r"\]\(([\w.-]+" + EXTENSIONS + r")\)")  # a link beside the page: ](NAME)


def _shown() -> set:
    """The files of ``docs/`` the markdown shows or names: ``docs/NAME`` in the README and in
    ``docs/*.md``, and links ``](NAME)`` in ``docs/*.md``."""
    found = set(NAMED.findall((ROOT / "README.md").read_text(encoding="utf-8")))
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        found |= set(NAMED.findall(text)) | set(LINKED.findall(text))
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
        flags = [part for part in picture.command if part.startswith("--")]
        assert all(flag in script.read_text(encoding="utf-8") for flag in flags), (name, flags)
        assert any("{out}" in part for part in picture.command), name  # it can draw elsewhere
        assert picture.cheap or picture.dear, f"{name}: say why the tests do not redraw it"


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGBA"), np.int16)


CHEAP = [name for name, picture in pictures.PICTURES.items() if picture.cheap]


@pytest.fixture(scope="module")
def redrawn(tmp_path_factory):
    out = tmp_path_factory.mktemp("pictures")
    for command in pictures.commands(CHEAP):
        pictures.draw(command, out)
    return out


@pytest.mark.parametrize("name", CHEAP)
def test_a_cheap_picture_redrawn_by_its_command_matches_the_committed_one(name, redrawn):
    """Same size, and every pixel within 8 of 255 but in at most 0.2% of them (text antialiasing)."""
    new, old = _pixels(redrawn / name), _pixels(DOCS / name)
    command = shlex.join(["python", *(part.replace("{out}", "docs") for part in pictures.PICTURES[name].command)])
    assert new.shape == old.shape, f"docs/{name} is stale: redraw it with {command}"
    off = np.abs(new - old).max(axis=-1) > 8
    assert off.mean() <= 0.002, f"docs/{name} is stale ({off.mean():.1%} of pixels differ): redraw it with {command}"
