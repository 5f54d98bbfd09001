#!/usr/bin/env bash
# The first command on a fresh machine: `scripts/setup-host.sh`, then
# `cargo run -p lazyinit-bench -- run quick` (or the arguments given, e.g.
# `scripts/first-run.sh run reported`), with the host packages and the
# harness's build side by side. Cargo needs none of what setup-host
# installs except a C compiler, pkg-config and OpenSSL's headers; when one
# of those is missing the two run one after the other.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- run quick
if command -v cc >/dev/null 2>&1 && command -v pkg-config >/dev/null 2>&1 \
  && pkg-config --exists openssl 2>/dev/null; then
  log=$(mktemp "${TMPDIR:-/tmp}/lazyinit-setup.XXXXXX") # private (0600), removed on exit
  setup=
  trap '[ -n "$setup" ] && kill "$setup" 2>/dev/null; rm -f "$log"' EXIT
  bash scripts/setup-host.sh >"$log" 2>&1 &
  setup=$!
  echo "first-run: host packages (scripts/setup-host.sh) beside the harness's build (cargo build)"
  cargo build -p lazyinit-bench
  if ! wait "$setup"; then
    setup=
    cat "$log" >&2
    echo "error: scripts/setup-host.sh failed (its output above): fix that, then run scripts/first-run.sh again" >&2
    exit 4
  fi
  setup=
  cat "$log"
  rm -f "$log"
else
  bash scripts/setup-host.sh
fi
exec cargo run -q -p lazyinit-bench -- "$@"
