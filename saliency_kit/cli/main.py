"""The ``saliency`` command: the parser assembled from one module per subcommand, the error
policy and the exit statuses.

    saliency explain photo.jpg                       # shipped model, guided backprop, top class
    saliency explain a.png b.png --method gradcam --method smoothgrad --target top2 --target star
    saliency batch images/ --out maps/ --shard 0/4 --resume
    saliency sanity photo.jpg --method gradient --method gradcam
    saliency evaluate a.png b.png --method gradient --method gradcam --out metrics/
    saliency models
    saliency methods

Exit status: 0 everything done; 1 some inputs failed (unreadable images, reported and skipped) or
an error while working; 2 the command could not start: bad arguments, an unknown model, method or
class, a model whose weights are not available here, an --out folder holding another run, a Keras
backend other than TensorFlow. Errors are one line; ``--debug`` shows the traceback and
everything TensorFlow logs.

A subcommand is a module with ``add_parser(subcommands, common)`` that registers its handler with
``set_defaults(handler=fn)``, ``fn(args) -> exit status``, and raises :class:`UsageError` for
problems found before its work starts. TensorFlow is imported only once a command needs a model.
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from . import batch, evaluate, explain, explain_text, listing, sanity
from .options import UsageError, message

__all__ = ["Parser", "build_parser", "main"]

#: The subcommands, in the order ``saliency --help`` lists them.
COMMANDS = (explain, batch, sanity, evaluate, explain_text, listing)


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``saliency explain: error: ...``), exit status 2."""

    def error(self, message: str) -> NoReturn:  # noqa: D401 - argparse's hook
        print(f"{self.prog}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(2)


def _common(debug_default) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=debug_default,
        help="show the full traceback of an error, and everything TensorFlow logs",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="saliency",
        description="Saliency maps for Keras models: explain images, or whole folders of them.",
        epilog="Exit status: 0 all done; 1 some inputs failed; 2 usage error (bad arguments, unknown "
        "model/method/class, model weights not available, --out holding another run).",
        parents=[_common(False)],
    )
    # Subcommands take --debug too, without resetting a --debug given before the subcommand.
    common = _common(argparse.SUPPRESS)
    subcommands = parser.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", required=True, parser_class=Parser
    )
    for command in COMMANDS:
        command.add_parser(subcommands, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    args = build_parser().parse_args(argv)
    prefix = f"saliency {args.command}"
    try:
        with warnings.catch_warnings():
            if not args.debug:
                warnings.showwarning = _show_warning(prefix)
            return int(args.handler(args) or 0)
    except UsageError as error:
        if args.debug:
            raise
        print(f"{prefix}: error: {message(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prefix}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - one line for users, the traceback with --debug
        if args.debug:
            raise
        print(
            f"{prefix}: error: {type(error).__name__}: {message(error)} (run with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


def _show_warning(prefix: str):
    """Warnings as one line each (``saliency batch: warning: ...``), without source lines, and
    each kind once: a batch run would otherwise repeat the same warning for every batch."""
    seen = set()

    def show(message, category, filename, lineno, file=None, line=None):
        text = " ".join(str(message).split())
        kind = (category, re.sub(r"\d+", "#", text))
        if kind not in seen:
            seen.add(kind)
            print(f"{prefix}: warning: {text}", file=file or sys.stderr)

    return show


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
