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

# shellcheck source=scripts/venv.sh
. "$(dirname "$0")/venv.sh"
venv="$cache/venv-moto"

make_venv "$venv" "$MOTO_SPEC" moto.server
if [ "${1:-}" = "--checkov" ]; then
    make_venv "$cache/venv-checkov" "$CHECKOV_SPEC" checkov
fi
echo "$venv/bin/moto_server"
