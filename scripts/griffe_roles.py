"""A griffe extension for the API page (mkdocs.yml lists it under mkdocstrings' ``extensions``): the
docstrings' reST roles (``:func:`~saliency_kit.explain```) shown as the code they name, reST simple
tables as preformatted text and reST comments (``.. note``) dropped, so that the Markdown
mkdocstrings renders reads as the docstrings do in a terminal."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:mod|class|func|meth|data|attr|obj|exc|py:\w+):`~?\.?([^`]+)`")
_RULE = re.compile(r"^=+( +=+)+$")


def _plain(text: str) -> str:
    out, rules = [], 0
    for line in text.splitlines():
        if line.startswith(".. ") and not rules:
            continue
        if _RULE.match(line.strip()):
            if rules == 0:
                out += ["", "```text"]
            rules += 1
            out.append(line)
            if rules == 3:
                out += ["```", ""]
                rules = 0
            continue
        if rules:  # a table row: the role's name alone, padded to keep the columns
            out.append(_ROLE.sub(lambda m: m.group(1).ljust(len(m.group(0))), line))
        else:
            out.append(_ROLE.sub(lambda m: f"``{m.group(1)}``", line))
    return "\n".join(out)


class Roles(griffe.Extension):
    """Rewrites each docstring's roles once it is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _plain(obj.docstring.value)
