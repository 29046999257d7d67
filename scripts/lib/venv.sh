# Shared by the scripts: create or reuse the virtual environment and install diffrec into it.
# Usage: source scripts/lib/venv.sh; ensure_venv [EXTRAS]   (sets VENV)
# Reinstalls only when backend/pyproject.toml, this file or the torch requirement changed since
# the last install, or when EXTRAS names one not installed yet; extras installed earlier (by
# another script) stay, so scripts/test and scripts/demo do not reinstall in turn.

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
    local stamp="$VENV/.diffrec-installed" hash have_hash="" have_extras="" have_torch=""
    hash=$(cat "$root/backend/pyproject.toml" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
    if [ -f "$stamp" ]; then
        IFS='|' read -r have_hash have_extras have_torch <"$stamp"
    fi
    if [ "$have_hash|$have_torch" != "$hash|$torch_req" ] ||
        ! extras_include "$have_extras" "$extras"; then
        extras=$(extras_union "$have_extras" "$extras")
        echo "== installing $torch_req and diffrec${extras:+[$extras]} into $VENV"
        pip_quietly install --upgrade pip
        pip_quietly install "$torch_req"
        pip_quietly install -e "$root/backend${extras:+[$extras]}"
        echo "$hash|$extras|$torch_req" >"$stamp"
    fi
    export PATH="$VENV/bin:$PATH"
}

# whether the comma-separated extras $1 include every one of $2
extras_include() {
    local name
    for name in ${2//,/ }; do
        [[ ",$1," == *",$name,"* ]] || return 1
    done
}

# the comma-separated extras of $1 and $2 together, each once, sorted
extras_union() {
    printf '%s\n' ${1//,/ } ${2//,/ } | sort -u | paste -sd, -
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
