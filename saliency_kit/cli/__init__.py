"""The ``saliency`` command line: one module per subcommand (:mod:`.explain`, :mod:`.batch`,
:mod:`.sanity`, :mod:`.listing`), shared options in :mod:`.options`, assembly and error policy in
:mod:`.main`. Importing it does not import TensorFlow."""

from .main import build_parser, main
from .options import UsageError

__all__ = ["main", "build_parser", "UsageError"]
