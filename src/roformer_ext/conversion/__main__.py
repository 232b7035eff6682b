"""`python -m roformer_ext.conversion` is the same as `roformer-ext-convert`."""

from .cli import main

raise SystemExit(main())
