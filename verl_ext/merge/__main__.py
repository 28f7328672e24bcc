"""`python -m verl_ext.merge ...` is the same as `merge-ppo ...`."""

from .cli import main

raise SystemExit(main())
