"""``python -m saliency_kit ...`` is the ``saliency`` command."""
from .cli import main

raise SystemExit(main())
