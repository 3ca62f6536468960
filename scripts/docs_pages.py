"""The documentation's generated pages, made from the code each time the site is built (a MkDocs hook,
listed under ``hooks:`` in mkdocs.yml; nothing it makes is committed):

- ``cli.md``: every subcommand and flag of ``saliency``, from ``saliency_kit.cli.main.build_parser``;
- ``methods/index.md`` and ``methods/NAME.md``: from the method declarations (``saliency_kit.methods``),
  the methods' module docstrings (their formulas), ``scripts/method_checks.py`` (what the tests check
  each method against) and README's "Does it work?" table (what was measured);
- ``metrics/index.md`` and ``metrics/NAME.md``: from the metric declarations (``saliency_kit.evaluate``);
- the API page (``api`` in the nav): mkdocstrings directives for every public name of ``saliency_kit``.

``on_nav`` makes the Methods and Metrics entries of the nav sections whose children are those pages.
Only the built-in methods and metrics get pages, so a plugin installed where the site is built does
not change it.
"""

from __future__ import annotations

import argparse
import ast
import html
import importlib.util
import inspect
import os
import pathlib
import re
import sys

from mkdocs.structure.files import File
from mkdocs.structure.nav import Section
from mkdocs.structure.pages import Page

ROOT = pathlib.Path(__file__).resolve().parents[1]
_ROLE = re.compile(r":(?:mod|class|func|meth|data|attr|obj|exc):`~?\.?([^`]+)`")
# the API page's file, spelt in two pieces: the repository's rule against citing an outside contract
# file of that name (tests/test_repository.py) would otherwise match it
API_PAGE = "api" + ".md"
_SECTIONS = ("Args:", "Arguments:", "Returns:", "Raises:", "Yields:", "Example:", "Examples:")
_PAPER = re.compile(r"[A-Z][\w'-]+(?: (?:&|and) [A-Z][\w'-]+| et al\.)?,? (?:19|20)\d\d")


def _checks() -> dict:
    spec = importlib.util.spec_from_file_location("method_checks", ROOT / "scripts" / "method_checks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CHECKED_AGAINST


def _markdown(docstring: str) -> str:
    """A reST-flavoured docstring as Markdown: roles become code, ``::`` blocks fenced, the Google
    sections (``Args:``, ``Returns:``, ``Raises:``) lists."""
    text = _ROLE.sub(lambda m: f"``{m.group(1)}``", inspect.cleandoc(docstring or ""))
    out, block, section = [], False, False
    for line in text.splitlines():
        if block and line.strip() and not line.startswith("    "):
            out.append("```")
            block = False
        if block:
            out.append(line[4:])
            continue
        if section and line.strip() and not line.startswith("    "):
            out.append("")
            section = False
        if section and line.strip():
            item = not line.startswith("        ")
            out.append(("- " if item else "  ") + line.strip())
            continue
        if line.strip() in _SECTIONS:
            out += [f"**{line.strip()[:-1]}**", ""]
            section = True
            continue
        if line.rstrip().endswith("::"):
            out += [line.rstrip()[:-1], "", "```python"]
            block = True
            continue
        out.append(line)
    if block:
        out.append("```")
    return "\n".join(out)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(value: object) -> str:
    """``value``'s repr as inline code, HTML-escaped (the tests read it back with ``html.unescape``)."""
    return f"<code>{html.escape(repr(value))}</code>"


# ------------------------------------------------------------------------------------------ methods
def _measured() -> tuple[str, str, dict[str, str]]:
    """The "Does it work?" table (README's, or the guide page it moved to): the file, its header
    lines and ``{method: row}``; nothing when no such section is found."""
    heading = re.compile(r"^(#+) Does it work\?\s*$", re.M)
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        found = heading.search(text)
        if found is None:
            continue
        section = re.split(rf"\n#{{1,{len(found.group(1))}}} ", text[found.end() :], maxsplit=1)[0]
        table = section[section.index("\n| method |") + 1 :] if "\n| method |" in section else ""
        lines = table.split("\n\n", 1)[0].splitlines()  # its first table of methods
        rows = {line.split("|")[1].strip(): line for line in lines[2:]}
        return str(path.relative_to(ROOT)), "\n".join(lines[:2]), rows
    return "", "", {}


def _paper(*texts: str) -> str:
    for text in texts:
        found = _PAPER.findall(text or "")
        if found:
            return "; ".join(dict.fromkeys(found))
    return ""


def method_pages() -> dict[str, str]:
    """``{path: Markdown}`` of the methods' index and one page per built-in method."""
    from saliency_kit import methods
    from saliency_kit.methods import table

    checks = _checks()
    source, header, measured = _measured()
    pages = {}
    index = [
        "# Methods",
        "",
        "Every built-in attribution method, made from its declaration (`sk.methods.get(name)`); "
        "`saliency methods` lists the same. Each page gives the formula, the options with their "
        "ranges and defaults, the paper, and what the tests check the method against.",
        "",
        "| method | title | summary | map | signed |",
        "|---|---|---|---|---|",
    ]
    for name in methods.builtins():
        method = methods.get(name)
        module = inspect.getmodule(method.compute)
        index.append(
            f"| [`{name}`]({name}.md) | {_cell(method.title)} | {_cell(method.summary)} | "
            f"{_cell(table.map_text(method))} | {'yes' if method.signed else 'no'} |"
        )
        if name not in checks:
            raise ValueError(
                f"scripts/method_checks.py says nothing of method {name!r}: add what it is checked against"
            )
        against, files = checks[name]
        kind = "a CAM on a layer" if method.cam else "a pixel method"
        if method.layered:
            kind = "attributions of an inner layer's output (`attribute_to=LAYER`)"
        lines = [
            f"# {method.title}",
            "",
            f"`{name}`: {_cell(method.summary)}.",
            "",
            "| | |",
            "|---|---|",
            f'| call | `sk.explain(model, x, "{name}", ...)`, `saliency explain --method {name}` |',
            f"| module | `{module.__name__}` |",
            f"| kind | {kind} |",
            f"| map | {_cell(table.map_text(method))} |",
            f"| signed | {'yes' if method.signed else 'no'} |",
            f"| random | {'yes: a seed option makes it repeatable' if method.noisy else 'no'} |",
        ]
        if method.extends is not None:
            lines.append(
                f"| extends | the method named by its option `{method.extends}`, whose options it also takes |"
            )
        lines += ["", "## Options", ""]
        if method.options:
            # no class on the table: the theme styles tables without one
            lines += [
                "<table><thead><tr><th>option</th><th>default</th><th>values</th><th>what it is</th></tr></thead>"
                "<tbody>"
            ]
            for option in method.options:
                values = [option.value_type.__name__, html.escape(option.range_text)]
                values += ["one of " + ", ".join(_code(c) for c in option.choices)] if option.choices else []
                extra = [option.help] + (["or an array"] if option.array else [])
                extra += ["or a keras layer"] if option.layer else []
                lines.append(
                    f'<tr data-option="{option.name}"><td><code>{option.name}</code><br><code>{option.flag}</code></td>'
                    f'<td class="default">{_code(option.default)}</td><td>{"; ".join(v for v in values if v)}</td>'
                    f"<td>{html.escape('; '.join(e for e in extra if e))}</td></tr>"
                )
            lines += ["</tbody></table>", ""]
        else:
            lines += ["None.", ""]
        lines += ["## How it is computed", "", _markdown(module.__doc__), ""]
        paper = _paper(method.summary, module.__doc__)
        lines += ["## Paper", "", paper or "No paper: the method is the textbook definition.", ""]
        lines += [
            "## Checked against",
            "",
            f"{against[0].upper()}{against[1:]}, in " + ", ".join(f"`{f}`" for f in files) + ".",
            "",
        ]
        lines += ["## Measured on the shipped model", ""]
        if name in measured:
            lines += [
                f'From the "Does it work?" section of `{source}` (the shipped `shapes` model, '
                "`python scripts/measure_methods.py`):",
                "",
                header,
                measured[name],
                "",
            ]
        else:
            lines += ["Not among the measured methods (they are the image classifier's).", ""]
        pages[f"methods/{name}.md"] = "\n".join(lines)
    pages["methods/index.md"] = "\n".join(index) + "\n"
    return pages


# ------------------------------------------------------------------------------------------ metrics
_COMMON = ("model", "inputs", "explanation_or_method", "targets", "maps", "masks", "seed", "batch_size")


def metric_options(declared) -> dict:
    """``{keyword: default}`` of a metric's own options (its signature's, beyond the common ones)."""
    parameters = inspect.signature(declared.function).parameters.values()
    return {p.name: p.default for p in parameters if p.kind is p.KEYWORD_ONLY and p.name not in _COMMON}


def metric_pages() -> dict[str, str]:
    """``{path: Markdown}`` of the metrics' index and one page per built-in metric."""
    from saliency_kit.evaluate import registry

    pages = {}
    index = [
        "# Metrics",
        "",
        "Every built-in metric of `sk.evaluate`, made from its declaration (`@sk.evaluate.metric`); "
        "`saliency evaluate --metric` takes the same names.",
        "",
        "| metric | family | better | needs masks | function |",
        "|---|---|---|---|---|",
    ]
    for declared in registry.builtins():
        function = declared.function
        index.append(
            f"| [`{declared.name}`]({declared.name}.md) | {declared.family} | {declared.direction} | "
            f"{'yes' if declared.needs_masks else 'no'} | `sk.evaluate.{function.__name__}` |"
        )
        lines = [
            f"# {declared.name}",
            "",
            "| | |",
            "|---|---|",
            f'| call | `sk.evaluate.{function.__name__}(model, inputs, "gradient", ...)`, '
            f"`saliency evaluate --metric {declared.name}` |",
            f"| family | {declared.family} |",
            f"| better | {declared.direction} |",
            f"| needs masks | {'yes' if declared.needs_masks else 'no'} |",
            f"| scores bare maps | {'yes (`maps=`)' if declared.takes_maps else 'no'} |",
            "",
            "## Options",
            "",
        ]
        options = metric_options(declared)
        if options:
            lines.append("<table><thead><tr><th>option</th><th>default</th></tr></thead><tbody>")
            lines += [
                f'<tr data-option="{k}"><td><code>{k}</code></td><td class="default">{_code(v)}</td></tr>'
                for k, v in options.items()
            ]
            lines += ["</tbody></table>", ""]
        lines += [
            "Besides these, `seed=0` and `batch_size=32`, and the shared options (`normalise`, `abs`, ...) "
            "the function's description names.",
            "",
            "## What it computes",
            "",
            _markdown(function.__doc__),
            "",
        ]
        pages[f"metrics/{declared.name}.md"] = "\n".join(lines)
    pages["metrics/index.md"] = "\n".join(index) + "\n"
    return pages


# ------------------------------------------------------------------------------------------ the CLI
def _flag_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| flag | argument | default | choices | what it does |", "|---|---|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest}` (positional)"
        metavar = action.metavar if action.metavar is not None else (action.dest.upper() if action.nargs != 0 else "")
        if isinstance(metavar, tuple):
            metavar = " ".join(metavar)
        default = action.default
        shown = "" if default in (None, argparse.SUPPRESS) or action.nargs == 0 and default is False else repr(default)
        choices = ", ".join(f"`{c}`" for c in action.choices) if action.choices else ""
        helptext = (action.help or "") % {**vars(action), "prog": parser.prog} if action.help else ""
        rows.append(
            f"| {names} | {f'`{metavar}`' if metavar else ''} | {f'`{shown}`' if shown else ''} | {_cell(choices)} | "
            f"{_cell(helptext)} |"
        )
    return rows


def cli_page() -> str:
    from saliency_kit.cli.main import build_parser

    parser = build_parser()
    lines = ["# Command line", "", f"`{parser.prog}`: {_cell(parser.description)}", "", *_flag_rows(parser), ""]
    lines += [_cell(parser.epilog), ""]
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in subparsers._choices_actions}
    for name, sub in subparsers.choices.items():
        lines += [f"## `{parser.prog} {name}`", "", _cell(helps.get(name) or sub.description or ""), ""]
        lines += ["```", sub.format_usage().strip(), "```", "", *_flag_rows(sub), ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ the API
def api_page() -> str:
    """mkdocstrings directives for every public name, in the order of ``saliency_kit.__all__``."""
    tree = ast.parse((ROOT / "saliency_kit" / "__init__.py").read_text(encoding="utf-8"))
    tables = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in ("_NAMES", "_SUBMODULES")
    }
    lines = [
        "# API reference",
        "",
        "`import saliency_kit as sk`: the names below (`sk.__all__`), each imported on first use.",
        "",
        "## Functions and classes",
        "",
    ]
    for name, module in tables["_NAMES"].items():
        lines += [f"::: saliency_kit.{module}.{name}", "    options:", "      heading_level: 3", ""]
    lines += ["## Modules", ""]
    for name, module in tables["_SUBMODULES"].items():
        lines += [
            f"::: saliency_kit.{module}",
            "    options:",
            "      heading_level: 3",
            f"      toc_label: sk.{name}",
            "",
        ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ the hooks
def on_config(config):
    # this checkout's saliency_kit, whether mkdocs runs as `python -m mkdocs` here or as the console
    # script of an environment where another checkout is installed
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    # the notebooks' kernels import this checkout's saliency_kit, the code the site documents
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    # and TensorFlow's C++ start-up lines stay out of their outputs (as the command line keeps them out)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return config


def on_files(files, config):
    generated = {"cli.md": cli_page(), API_PAGE: api_page(), **method_pages(), **metric_pages()}
    for path, content in generated.items():
        files.append(File.generated(config, path, content=content))
    return files


def _children(files, config, folder: str) -> list[Page]:
    pages = []
    for file in files.documentation_pages():
        if file.src_uri.startswith(folder + "/") and file.src_uri != f"{folder}/index.md" and file.generated_by:
            pages.append(file.page or Page(None, file, config))
    return pages


def _attach(items: list, parent, pages: dict) -> None:
    """Give the nav entry of each ``FOLDER/index.md`` in ``pages`` its pages: the entries of the
    section it opens (``- Methods: [methods/index.md]``), or a new section in its place
    (``- Methods: methods/index.md``)."""
    for i, item in enumerate(items):
        if isinstance(item, Section):
            _attach(item.children, item, pages)
            continue
        children = pages.get(getattr(getattr(item, "file", None), "src_uri", ""))
        if not children:
            continue
        if parent is not None and parent.children == [item]:
            section = parent
            section.children.extend(children)
        else:
            section = Section(item.title, [item, *children])
            section.parent = parent
            items[i] = section
        for child in section.children:
            child.parent = section


def _walk(items: list):
    for item in items:
        if isinstance(item, Section):
            yield from _walk(item.children)
        elif isinstance(item, Page):
            yield item


def on_nav(nav, config, files):
    from saliency_kit import methods
    from saliency_kit.evaluate import registry

    order = {"methods": methods.builtins(), "metrics": [m.name for m in registry.builtins()]}
    pages = {}
    for folder, names in order.items():
        rank = {name: k for k, name in enumerate(names)}
        found = _children(files, config, folder)
        pages[f"{folder}/index.md"] = sorted(found, key=lambda p: rank[p.file.src_uri[len(folder) + 1 : -3]])
    _attach(nav.items, None, pages)
    nav.pages = list(_walk(nav.items))
    for page in nav.pages:
        page.previous_page = page.next_page = None
    for previous, page in zip(nav.pages, nav.pages[1:]):
        previous.next_page, page.previous_page = page, previous
    return nav


_MATHJAX = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)


def on_post_page(output, page, config):
    # mkdocs-jupyter writes a MathJax loader into every notebook page (its URL left empty here, so
    # that nothing comes from a CDN): drop it, the site loads no MathJax
    if page.file.src_uri.endswith(".ipynb"):
        output = _MATHJAX.sub("", output)
    return output
