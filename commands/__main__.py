"""``python -m commands`` is the ``baton`` command."""
import sys

from .cli import main

sys.exit(main())
