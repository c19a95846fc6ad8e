#!/usr/bin/env bash
# The test command: sets up ./.venv on a fresh machine, then runs the test suite.
# Extra arguments go to pytest (e.g. `scripts/test.sh -m slow` for the heavy, bounded runs).
source "$(dirname "$0")/env.sh"
exec python -m pytest "$@"
