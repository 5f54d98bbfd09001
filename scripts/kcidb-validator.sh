#!/usr/bin/env bash
# Installs KCIDB's schema and validator (the `kcidb-io` package, from PyPI)
# into a virtualenv outside the clone, idempotently, and prints the path of
# its python. The KCIDB export tests pipe each export to
# `kcidb_io.schema.LATEST.validate` through that python; without it they
# fail (they never skip).
#
#   scripts/kcidb-validator.sh          # install (or check) and print the path
#   scripts/kcidb-validator.sh FILE...  # also validate each KCIDB JSON file
#
# Environment: LAZYINIT_CACHE_DIR (default ~/.cache/lazyinit-bench) holds
# venv-kcidb/.
set -euo pipefail

# Version 141 carries schema v5.3 (tests' `number` output).
KCIDB_SPEC='kcidb-io==141.*'

# shellcheck source=scripts/venv.sh
. "$(dirname "$0")/venv.sh"
venv="$cache/venv-kcidb"

make_venv "$venv" "$KCIDB_SPEC" kcidb_io.schema
for f in "$@"; do
    "$venv/bin/python" - "$f" <<'PY'
import json, sys
from kcidb_io.schema import LATEST
with open(sys.argv[1]) as f:
    LATEST.validate(json.load(f))
print(f"{sys.argv[1]}: valid KCIDB v{LATEST.major}.{LATEST.minor}", file=sys.stderr)
PY
done
echo "$venv/bin/python"
