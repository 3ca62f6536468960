"""``saliency models`` and ``saliency methods``: what is available, one line each, without
importing TensorFlow (the method declarations and model configs are plain data)."""

from __future__ import annotations

import argparse
from typing import Any

from .. import methods, zoo
from .options import PYTHON_ONLY_OPTIONS, option_flags

__all__ = ["add_parser", "list_models", "list_methods"]


def add_parser(subcommands: Any, common: argparse.ArgumentParser) -> None:
    models = subcommands.add_parser("models", parents=[common], help="list the named models")
    models.set_defaults(handler=list_models)
    listing = subcommands.add_parser("methods", parents=[common], help="list the attribution methods")
    listing.set_defaults(handler=list_methods)


def list_models(args: argparse.Namespace) -> int:
    names = [str(name) for name in zoo.list_models()]
    width = max((len(name) for name in names), default=0)
    for name in names:
        try:
            description = zoo.get_spec(name).description or ""
        except (ValueError, FileNotFoundError) as error:  # a broken config is listed, with its problem
            description = f"(config error: {' '.join(str(error).split())})"
        print(f"{name:<{width}}  {description}".rstrip())
    return 0


def list_methods(args: argparse.Namespace) -> int:
    entries = methods.describe()
    width = max(len(name) for name, _ in entries)
    flags = option_flags()
    for name, summary in entries:
        hidden = [
            f"{option!r} is not on the command line ({reason}; Python can give it)"
            for option, reason in PYTHON_ONLY_OPTIONS.items()
            if option in flags and name in flags[option][1]
        ]
        print(f"{name:<{width}}  {summary}" + "".join(f"; option {text}" for text in hidden))
    return 0
