"""Write the docs' metric table from the metric declarations.

    python scripts/metric_table.py [--write]

The table of the built-in metrics in ``docs/guide/evaluation.md`` (between its two marker comments)
is made by :func:`saliency_kit.evaluate.registry.markdown`. Without ``--write`` it says whether it is
stale and exits 1 (``tests/evaluate/test_registry.py`` runs the same comparison); with ``--write``
it rewrites it.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from saliency_kit.evaluate import registry  # noqa: E402

PAGE = REPO / "docs" / "guide" / "evaluation.md"  # the metrics table of "Which method should I trust?"


def updated_page(text: str) -> str:
    """``text`` with the table between the markers made again from the declarations."""
    start, end = text.index(registry.README_START), text.index(registry.README_END)
    return text[: start + len(registry.README_START)] + "\n" + registry.markdown() + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite a stale table")
    args = parser.parse_args(argv)
    text = PAGE.read_text(encoding="utf-8")
    new = updated_page(text)
    if new == text:
        return 0
    if args.write:
        PAGE.write_text(new, encoding="utf-8")
    print(f"{'rewrote' if args.write else 'stale'}: {PAGE.relative_to(REPO)}")
    return 0 if args.write else 1


if __name__ == "__main__":
    sys.exit(main())
