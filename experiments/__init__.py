"""The project's experiments: each script's docstring is its protocol, fixed before its runs, and it
writes its tables under results/NAME/. Run one from the checkout as `python -m experiments.NAME`
(a package, so that the scripts import their shared parts, `_common` and `_arms`, by name)."""
