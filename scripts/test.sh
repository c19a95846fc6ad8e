#!/usr/bin/env bash
# The test command: sets up ./.venv on a fresh machine, installs Fashion-MNIST where it can (as
# scripts/main.sh does; without it the tests that need it skip, naming the install command) and
# Chromium (the live report's browser test, likewise), checks
# the import contracts of pyproject.toml (`lint-imports`: the search engine imports no task; a
# broken contract fails the command before any test runs), then runs the test suite. Extra
# arguments go to pytest (e.g. `scripts/test.sh -m slow` for the heavy, bounded runs). The tests
# run in two processes (pytest-xdist, one torch thread each; `-n 0` after it runs them in one):
# much of the suite is single-threaded Python, so two processes finish in about 0.6 of the time.
source "$(dirname "$0")/env.sh"
ensure_fashion_mnist || true
ensure_chromium || true
lint-imports --no-cache || exit 1
exec python -m pytest -n 2 --dist worksteal "$@"
