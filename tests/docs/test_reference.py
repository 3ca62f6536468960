"""The site's generated pages, read back from the built HTML and compared with the code they come from:
a page per built-in method and metric with its options and defaults as declared, every flag of every
subcommand on the command-line page, the public API documented, the notebooks executed, and nothing
loaded from the network."""

from __future__ import annotations

import argparse
import html
import importlib.util
import inspect
import json
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from saliency_kit import methods
from saliency_kit.evaluate import registry
from saliency_kit.methods import table

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = ("quickstart", "tasks", "evaluation")
_ROW = re.compile(r'<tr data-option="(\w+)">(.*?)</tr>', re.S)
_DEFAULT = re.compile(r'<td class="default"><code>(.*?)</code></td>', re.S)
_COMMON = {"model", "inputs", "explanation_or_method", "targets", "maps", "masks", "seed", "batch_size"}


def _page(site: pathlib.Path, path: str) -> str:
    page = site / path / "index.html"
    assert page.is_file(), f"the site has no page {path}/"
    return page.read_text(encoding="utf-8")


def _options(page: str) -> dict[str, str]:
    """``{option: default as the page shows it}`` from a page's options table."""
    rows = {}
    for name, cells in _ROW.findall(page):
        found = _DEFAULT.search(cells)
        assert found, f"option {name} has no default cell"
        rows[name] = html.unescape(found.group(1))
    return rows


def _hook():
    spec = importlib.util.spec_from_file_location("docs_pages", ROOT / "scripts" / "docs_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_built_in_method_has_a_page_with_its_declared_options_and_defaults(built_site):
    index = _page(built_site, "methods")
    for name in methods.builtins():
        method = methods.get(name)
        page = _page(built_site, f"methods/{name}")
        assert f'href="{name}/"' in index, f"the methods index does not link {name}"
        assert html.escape(method.title, quote=False) in page
        assert f"<td>{html.escape(table.map_text(method), quote=False)}</td>" in page, name  # a whole cell
        shown = _options(page)
        assert list(shown) == [option.name for option in method.options], name
        for option in method.options:
            assert shown[option.name] == repr(option.default), (name, option.name)
            if option.range_text:
                assert html.escape(option.range_text, quote=False) in page, (name, option.name)
        for heading in ("How it is computed", "Paper", "Checked against"):
            assert f">{heading}<" in page, (name, heading)


def test_every_built_in_metric_has_a_page_with_its_options_and_defaults(built_site):
    index = _page(built_site, "metrics")
    for declared in registry.builtins():
        page = _page(built_site, f"metrics/{declared.name}")
        assert f'href="{declared.name}/"' in index
        assert f"<td>{declared.family}</td>" in page and f"<td>{declared.direction}</td>" in page
        signature = inspect.signature(declared.function).parameters.values()
        own = {p.name: p.default for p in signature if p.kind is p.KEYWORD_ONLY and p.name not in _COMMON}
        assert _options(page) == {k: repr(v) for k, v in own.items()}, declared.name


def test_the_methods_and_metrics_sections_of_the_nav_list_every_page(built_site):
    page = _page(built_site, "cli")  # any page: the nav is on every one
    for name in methods.builtins():
        assert f'href="../methods/{name}/"' in page, name
    for declared in registry.builtins():
        assert f'href="../metrics/{declared.name}/"' in page, declared.name


def test_the_command_line_page_lists_every_flag_of_every_subcommand(built_site):
    from saliency_kit.cli.main import build_parser

    page = _page(built_site, "cli")
    parser = build_parser()
    sections = {
        m.group(1): m.group(2) for m in re.finditer(r'<h2 id="saliency-([\w-]+)".*?>(.*?)(?=<h2 |$)', page, re.S)
    }
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sections) == {name.replace("_", "-") for name in subcommands.choices}
    for name, sub in subcommands.choices.items():
        section = sections[name.replace("_", "-")]
        for action in sub._actions:
            for flag in action.option_strings:
                assert f"<code>{flag}</code>" in section, (name, flag)
            if not action.option_strings:
                assert f"<code>{action.dest}</code>" in section, (name, action.dest)
            if action.choices:
                for choice in action.choices:
                    assert f"<code>{html.escape(str(choice), quote=False)}</code>" in section, (name, choice)
            if action.default not in (None, argparse.SUPPRESS, False) and action.option_strings:
                assert f"<code>{html.escape(repr(action.default), quote=False)}</code>" in section, (
                    name,
                    action.dest,
                )
    for flag in ("--debug", "--help"):
        assert f"<code>{flag}</code>" in page.split('<h2 id="saliency-')[0]


def test_the_api_page_documents_every_public_name(built_site):
    import saliency_kit as sk

    page = _page(built_site, "api")
    ids = set(re.findall(r'<h3 id="(saliency_kit[\w.]*)"', page))
    for name in sk.__all__:
        if name == "__version__":
            continue
        value = getattr(sk, name)
        if inspect.ismodule(value):
            assert value.__name__ in ids, name
        else:
            assert any(i.endswith(f".{name}") for i in ids), name
    assert 'id="saliency_kit.pipeline.api.explain--parameters"' in page or "Parameters:" in page


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_each_notebook_page_holds_its_executed_outputs(built_site, name):
    page = _page(built_site, f"notebooks/{name}")
    assert 'src="data:image/png;base64,' in page, f"{name}: no image output"
    assert "Traceback" not in page and "jp-OutputArea-output" in page
    assert "cpu_feature_guard" not in page and "absl::" not in page, f"{name}: TensorFlow's logs in the outputs"
    source = json.loads((ROOT / "docs" / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
    for cell in source["cells"]:  # committed without outputs: the site's are its own run
        assert not cell.get("outputs") and cell.get("execution_count") is None


def test_no_page_loads_anything_from_the_network(built_site):
    loads = re.compile(
        r'<(?:script|img|iframe|source)[^>]*\ssrc="(?:https?:)?//|<link[^>]*\shref="(?:https?:)?//', re.I
    )
    for page in built_site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not loads.search(text), f"{page.relative_to(built_site)} loads {loads.search(text).group(0)}"
        assert '<script src="">' not in text, page
        assert "@import url(http" not in text, page


def test_the_pages_are_of_the_built_in_methods_only_whatever_is_registered(tmp_path):
    hook = _hook()

    @methods.register("doc_test_user_method", summary="a user's method", options={"power": 2.0})
    def _user(ctx, power):
        return ctx.inputs

    try:
        pages = hook.method_pages()
    finally:
        methods.unregister("doc_test_user_method")
    assert set(pages) == {"methods/index.md", *(f"methods/{n}.md" for n in methods.builtins())}
    assert "doc_test_user_method" not in pages["methods/index.md"]


def test_what_each_method_is_checked_against_is_recorded_once_for_every_built_in():
    spec = importlib.util.spec_from_file_location("method_checks", ROOT / "scripts" / "method_checks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert list(module.CHECKED_AGAINST) == methods.builtins()
    for name, (text, files) in module.CHECKED_AGAINST.items():
        assert text and files, name
        for file in files:
            assert name in (ROOT / file).read_text(encoding="utf-8"), (name, file)


def test_a_notebook_that_fails_fails_the_build(tmp_path):
    """The site's mkdocs-jupyter settings on a one-notebook site whose cell raises."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    jupyter = next(p["mkdocs-jupyter"] for p in config["plugins"] if isinstance(p, dict) and "mkdocs-jupyter" in p)
    docs = tmp_path / "docs" / "notebooks"
    docs.mkdir(parents=True)
    (tmp_path / "docs" / "index.md").write_text("# Home\n")
    import nbformat

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")])
    notebook.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    nbformat.write(notebook, docs / "broken.ipynb")
    site = {"site_name": "t", "strict": True, "plugins": [{"mkdocs-jupyter": jupyter}]}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(site))
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert "ZeroDivisionError" in done.stdout + done.stderr


def test_the_measured_methods_show_their_row_of_the_does_it_work_table(built_site):
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    texts = [p.read_text(encoding="utf-8") for p in sources]
    text = next((t for t in texts if "Does it work?" in t), "")
    section = text.split("Does it work?", 1)[-1].split("\n## ", 1)[0]
    table = section.split("\n| method |", 1)[-1].split("\n\n", 1)[0]
    rows = dict(re.findall(r"^\| (\w+) \| ([^|]+?) \|", table, re.M))
    assert "gradient" in rows, "no table of measured methods found"
    for name, pointing in rows.items():
        if name in methods.builtins():
            assert f"<td>{html.escape(pointing, quote=False)}</td>" in _page(built_site, f"methods/{name}"), name
