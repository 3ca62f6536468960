"""Write the method tables of the docs from the method declarations.

    python scripts/method_tables.py [--write]

The table of the built-in methods in ``docs/guide/python.md`` (between its two marker comments) and the table in
``saliency_kit/methods/__init__.py``'s docstring are made by :mod:`saliency_kit.methods.table`.
Without ``--write`` it prints which of them is stale and exits 1 (``tests/methods/test_base.py``
runs the same comparison); with ``--write`` it rewrites them.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from saliency_kit.methods import table  # noqa: E402

PAGE = REPO / "docs" / "guide" / "python.md"  # the methods table of the Python guide
PACKAGE_INIT = REPO / "saliency_kit" / "methods" / "__init__.py"
_RST = re.compile(r"(?m)^=+(?:  =+)*\n.*?\n=+(?:  =+)*\n(?:.*\n)*?=+(?:  =+)*$")


def updated_page(text: str) -> str:
    start, end = text.index(table.README_START), text.index(table.README_END)
    return text[: start + len(table.README_START)] + "\n" + table.markdown() + "\n" + text[end:]


def updated_package_docstring(text: str) -> str:
    return _RST.sub(lambda _: table.rst(), text, count=1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the stale tables")
    args = parser.parse_args(argv)
    stale = []
    for path, update in ((PAGE, updated_page), (PACKAGE_INIT, updated_package_docstring)):
        text = path.read_text(encoding="utf-8")
        new = update(text)
        if new != text:
            stale.append(path.relative_to(REPO))
            if args.write:
                path.write_text(new, encoding="utf-8")
    for path in stale:
        print(f"{'rewrote' if args.write else 'stale'}: {path}")
    return 0 if args.write or not stale else 1


if __name__ == "__main__":
    sys.exit(main())
