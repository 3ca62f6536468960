"""The documentation site: it builds in strict mode (a warning or a broken link fails), it loads
nothing from the network, every page of the nav is there, and the README stays short with every
relative link leading to a file of the repository."""

import html.parser
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
REMOTE = re.compile(r"^\s*(?:https?:)?//", re.IGNORECASE)
CSS_URL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"]?)([^'")\s;]+)""", re.IGNORECASE)
LOADS = {"src", "data", "poster", "srcset"}  # attributes whose value the browser fetches


class _Loads(html.parser.HTMLParser):
    """What a page makes the browser fetch: ``src``-like attributes, ``<link href>``, CSS ``url(``
    and ``@import`` in ``<style>`` and ``style=`` (``<a href>`` is a link to follow, not a load)."""

    def __init__(self):
        super().__init__()
        self.found, self._in_style = [], False

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name in LOADS or (tag == "link" and name == "href"):
                candidates = value.split(",") if name == "srcset" else [value]
                self.found += [part.split()[0] for part in candidates if part.strip()]
            if name == "style":
                self.found += CSS_URL.findall(value)
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.found += CSS_URL.findall(data)


def _remote_loads(site: Path) -> list[str]:
    remote = []
    for page in sorted(site.rglob("*.html")):
        parser = _Loads()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        remote += [f"{page.relative_to(site)}: {url}" for url in parser.found if REMOTE.match(url)]
    for sheet in sorted(site.rglob("*.css")):
        text = sheet.read_text(encoding="utf-8", errors="replace")
        remote += [f"{sheet.relative_to(site)}: {url}" for url in CSS_URL.findall(text) if REMOTE.match(url)]
    return remote


def test_the_site_builds_in_strict_mode_and_loads_nothing_from_the_network(built_site):
    assert (built_site / "index.html").is_file() and (built_site / "guide" / "python" / "index.html").is_file()
    assert not _remote_loads(built_site), _remote_loads(built_site)


def test_the_check_for_network_loads_finds_them(tmp_path):
    """The check itself: a page with a web font, a CDN script or a remote image is caught; a link out is not."""
    (tmp_path / "a.html").write_text(
        '<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">'
        '<script src="//cdn.example.org/x.js"></script><a href="https://keras.io">Keras</a>'
        '<div style="background: url(\'http://example.org/b.png\')"></div><style>@import "https://x.org/y.css";</style>'
        '<img srcset="local.png 1x, https://example.org/2x.png 2x">'
    )
    (tmp_path / "b.css").write_text(
        "@font-face { src: url(https://example.org/f.woff2) } .x { background: url(data:image/png;base64,AA) }"
    )
    found = _remote_loads(tmp_path)
    assert len(found) == 6 and not any("keras.io" in url for url in found), found


class _AnyTag(yaml.SafeLoader):
    """mkdocs.yml may hold tags (``!ENV``, ``!!python/name:``) that only mkdocs resolves."""


_AnyTag.add_multi_constructor("", lambda loader, suffix, node: None)


def _nav_pages(entry) -> list[str]:
    if isinstance(entry, str):
        return [entry] if not REMOTE.match(entry) else []
    if isinstance(entry, list):
        return [page for item in entry for page in _nav_pages(item)]
    if isinstance(entry, dict):
        return [page for value in entry.values() for page in _nav_pages(value)]
    return []


def _built(site, page: str) -> bool:
    """Whether the built ``site`` has ``page`` (``a/b.md`` or ``.ipynb`` is ``a/b/index.html``)."""
    stem = page.rsplit(".", 1)[0]
    return (site / (stem + ".html" if stem.endswith("index") else stem + "/index.html")).is_file()


def test_every_page_of_the_nav_exists_and_every_hand_written_page_is_in_it(built_site):
    """Each nav entry is a page of docs/ or one the build generates from the code, and was built."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_AnyTag)
    pages = _nav_pages(config["nav"])
    assert "index.md" in pages and "guide/python.md" in pages and "cli.md" in pages, pages
    missing = [page for page in pages if not _built(built_site, page)]
    assert not missing, missing
    written = {str(path.relative_to(DOCS)) for folder in (DOCS, DOCS / "guide") for path in folder.glob("*.md")}
    assert written - set(pages) == set(), sorted(written - set(pages))


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _slug(heading: str) -> str:
    """The anchor GitHub and MkDocs give a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_the_readme_is_short_and_its_relative_links_lead_somewhere():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300, len(text.splitlines())
    anchors = {_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}
    links = LINK.findall(text)
    assert any(link.startswith("docs/guide/") for link in links), links
    broken = []
    for link in links:
        if REMOTE.match(link) or link.startswith("mailto:"):
            continue
        path, _, anchor = link.partition("#")
        if path and not (ROOT / path).exists():
            broken.append(link)
        elif not path and anchor not in anchors:
            broken.append(link)
    assert not broken, broken


def test_the_readme_and_the_home_page_count_the_methods_there_are():
    from saliency_kit import methods

    for page in (ROOT / "README.md", DOCS / "index.md"):
        counts = re.findall(r"with (\d+) methods", page.read_text(encoding="utf-8"))
        assert counts == [str(len(methods.builtins()))], (page.name, counts)
