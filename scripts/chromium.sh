#!/usr/bin/env bash
# Debian's chromium for the dashboard's browser test (crates/lazyinit-site/
# tests/browser.rs opens the published site in headless Chromium). The test
# fails, never skips, when chromium is missing; this installs it.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium >/dev/null
