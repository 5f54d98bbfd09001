#!/usr/bin/env bash
# Installs the EC2 API emulator (moto's server mode, from PyPI) into a
# virtualenv outside the clone, idempotently, and prints the path of
# `moto_server`. The EC2 crate's integration tests start that binary
# themselves on a free loopback port; nothing is left running here.
#
#   scripts/ec2-emulator.sh            # install (or check) and print the path
#   scripts/ec2-emulator.sh --checkov  # also install checkov (terraform scanner)
#
# Environment: LAZYINIT_CACHE_DIR (default ~/.cache/lazyinit-bench) holds
# venv-moto/ (and venv-checkov/).
set -euo pipefail

MOTO_SPEC='moto[server]==5.1.*'
CHECKOV_SPEC='checkov==3.*'

cache="${LAZYINIT_CACHE_DIR:-$HOME/.cache/lazyinit-bench}"
venv="$cache/venv-moto"
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

make_venv "$venv" "$MOTO_SPEC" moto.server
if [ "${1:-}" = "--checkov" ]; then
    make_venv "$cache/venv-checkov" "$CHECKOV_SPEC" checkov
fi
echo "$venv/bin/moto_server"
