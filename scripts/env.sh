# Sourced by the other scripts: makes ./.venv with evonorm and what it needs, once.
# torch is pinned in this install step (a bare `torch` would pull a multi-GB CUDA build);
# the package itself accepts any torch >= 2.3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRAS="${EVONORM_EXTRAS:-dev,plots}"
STAMP="$VENV/.evonorm-installed-$EXTRAS-$(cksum < "$ROOT/pyproject.toml" | cut -d' ' -f1)"
if [ ! -f "$STAMP" ]; then
    echo "setting up $VENV (extras: $EXTRAS)" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip >&2 || true
    "$VENV/bin/python" -m pip install -q "torch==2.13.0" >&2
    "$VENV/bin/python" -m pip install -q -e "$ROOT[$EXTRAS]" "torch==2.13.0" >&2
    touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
