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
    pip_install() {  # quiet; on failure show pip's messages (minus its notes about absent local mirrors)
        local log rc=0
        log=$(mktemp)
        "$VENV/bin/python" -m pip install -q "$@" 2>"$log" || rc=$?
        grep -v "^WARNING: Location" "$log" >&2 || true
        rm -f "$log"
        return $rc
    }
    pip_install --upgrade pip || true
    pip_install "torch==2.13.0"
    pip_install -e "$ROOT[$EXTRAS]" "torch==2.13.0"
    touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
