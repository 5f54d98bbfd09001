# Sourced, not run: creates a virtualenv under the project cache and installs
# one pinned PyPI spec into it, idempotently. Used by ec2-emulator.sh (moto,
# checkov) and kcidb-validator.sh (kcidb-io).
#
# Environment: LAZYINIT_CACHE_DIR (default ~/.cache/lazyinit-bench).

cache="${LAZYINIT_CACHE_DIR:-$HOME/.cache/lazyinit-bench}"
# Debian's python has ensurepip through python3-venv (scripts/setup-host.sh);
# prefer it over a pyenv shim so the venv does not depend on a user's shell.
py=/usr/bin/python3
[ -x "$py" ] || py="$(command -v python3)"

make_venv() { # dir spec probe-module
    local dir="$1" spec="$2" probe="$3"
    if [ -x "$dir/bin/python" ] && "$dir/bin/python" -c "import $probe" 2>/dev/null \
        && [ -f "$dir/.spec" ] && [ "$(cat "$dir/.spec")" = "$spec" ]; then
        return 0
    fi
    echo "installing $spec into $dir" >&2
    rm -rf "$dir"
    mkdir -p "$(dirname "$dir")"
    if ! "$py" -m venv "$dir" >&2; then
        echo "error: cannot create a virtualenv with $py: apt-get install python3-venv" >&2
        exit 4
    fi
    "$dir/bin/pip" install --quiet --disable-pip-version-check "$spec" >&2
    echo "$spec" > "$dir/.spec"
}
