#!/usr/bin/env bash
# Installs the checkers of the job files in examples/ (from PyPI, each in
# its own virtualenv outside the clone), idempotently, and prints the
# folder of their commands:
#
#   check-jsonschema (GitHub Actions workflows, its vendored schema
#                     `vendor.github-workflows`)
#   kubernetes-validate (Kubernetes manifests against the API's schemas,
#                     bundled: no cluster, no network)
#
#   scripts/job-validators.sh           # install (or check), print the folder
#   scripts/job-validators.sh check     # also check every file in examples/
#
# crates/lazyinit-bench/tests/job_files.rs runs the checkers through this
# script; without them it fails (it never skips). actionlint is not here:
# its PyPI package downloads its binary from GitHub when it is installed.
#
# Environment: LAZYINIT_CACHE_DIR (default ~/.cache/lazyinit-bench) holds
# venv-check-jsonschema/ and venv-kubernetes-validate/.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/venv.sh
. scripts/venv.sh
make_venv "$cache/venv-check-jsonschema" 'check-jsonschema==0.39.*' check_jsonschema
make_venv "$cache/venv-kubernetes-validate" 'kubernetes-validate==1.37.*' kubernetes_validate
bin="$cache/job-validators-bin"
mkdir -p "$bin"
ln -sf "$cache/venv-check-jsonschema/bin/check-jsonschema" "$bin/check-jsonschema"
ln -sf "$cache/venv-kubernetes-validate/bin/kubernetes-validate" "$bin/kubernetes-validate"

if [ "${1:-}" = check ]; then
    "$bin/check-jsonschema" --builtin-schema vendor.github-workflows examples/github-actions/*.yml >&2
    "$bin/kubernetes-validate" --strict examples/kubernetes/*.yaml >&2
    for f in examples/slurm/*.sbatch; do bash -n "$f"; done
fi
echo "$bin"
