# Shared by the scripts: create or reuse the virtual environment and install diffrec into it.
# Usage: source scripts/lib/venv.sh; ensure_venv [EXTRAS]   (sets VENV)
# Reinstalls only when backend/pyproject.toml or this file changed since the last install.

ensure_venv() {
    local extras=${1:-}
    local root
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    VENV=${DIFFREC_VENV:-$root/.venv}
    local python=${PYTHON:-python3}
    local torch_req=${DIFFREC_TORCH:-torch==2.13.0}
    if [ ! -x "$VENV/bin/python" ]; then
        echo "== creating $VENV"
        "$python" -m venv "$VENV"
    fi
    local stamp="$VENV/.diffrec-installed"
    local want
    want=$(cat "$root/backend/pyproject.toml" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
    want="$want $extras $torch_req"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        echo "== installing $torch_req and diffrec${extras:+[$extras]} into $VENV"
        pip_quietly install --upgrade pip
        pip_quietly install "$torch_req"
        pip_quietly install -e "$root/backend${extras:+[$extras]}"
        echo "$want" >"$stamp"
    fi
    export PATH="$VENV/bin:$PATH"
}

# pip in $VENV, its output (warnings, setuptools' deprecation boxes) shown only if it fails
pip_quietly() {
    local log
    log=$(mktemp)
    if ! "$VENV/bin/python" -m pip "$@" -q >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        return 1
    fi
    rm -f "$log"
}
