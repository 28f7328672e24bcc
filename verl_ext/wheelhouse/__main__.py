"""`python3 -m verl_ext.wheelhouse ...` (same as `verl-ext wheelhouse ...`)."""

from verl_ext.wheelhouse.cli import main

raise SystemExit(main())
