"""``python -m saliency_kit ...`` is the ``saliency`` command."""

from .cli import main

if __name__ == "__main__":  # not when a worker process of `saliency batch` imports this module
    raise SystemExit(main())
