"""``python -m autotune``: the command line."""
from .cli import main

raise SystemExit(main())
