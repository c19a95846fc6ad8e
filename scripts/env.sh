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

# Fashion-MNIST (Debian's dataset-fashion-mnist), the real data of the main job and of the tests that
# need it: installed where this runs as root with apt-get, else one line on how to install it.
ensure_fashion_mnist() {
    local system=/usr/share/datasets/fashion-mnist
    local user="${EVONORM_DATA:-$HOME/.cache/evonorm/data}/fashion-mnist"
    [ -d "$system" ] || [ -d "$user" ] && return 0
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "installing Fashion-MNIST (apt-get install dataset-fashion-mnist)" >&2
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist) \
            >/dev/null 2>&1 || echo "apt-get could not install dataset-fashion-mnist" >&2
    fi
    [ -d "$system" ] && return 0
    echo "Fashion-MNIST is not installed and cannot be installed here (needs root and apt-get): run" \
         "'sudo apt-get install dataset-fashion-mnist' or put its IDX files in $user" >&2
    return 1
}

# Chromium (Debian's chromium), for the test that opens the live report in a real headless browser:
# installed where this runs as root with apt-get; elsewhere that one test skips, naming the package.
ensure_chromium() {
    command -v chromium >/dev/null && return 0
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "installing Chromium (apt-get install chromium) for the live-report browser test" >&2
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
            >/dev/null 2>&1 || echo "apt-get could not install chromium" >&2
    fi
    command -v chromium >/dev/null
}
