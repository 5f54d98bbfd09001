# Sourced by scripts/bisect-history.sh and scripts/bisect-history-wide.sh:
# the part of a bisect history that every history shares.
#   history_kept DIR STAMP   true when DIR was made with STAMP (keep it)
#   history_base DIR DAY     Debian's 6.1 source unpacked into a fresh DIR
#                            (the working directory afterwards), committed
#                            as commit 0 of a git history whose names,
#                            emails and dates are fixed (DAY: 2026-01-01)
#   at N                     commit N's fixed date (DAY, N seconds past
#                            midnight), for the commits that follow
history_kept() {
  [ -f "$1/.git/lazyinit-history" ] && [ "$(cat "$1/.git/lazyinit-history")" = "$2" ]
}

history_base() {
  local dir=$1 tarball=/usr/src/linux-source-6.1.tar.xz
  history_day=$2
  [ -f "$tarball" ] || { echo "error: $tarball is missing: run scripts/setup-host.sh" >&2; exit 4; }
  rm -rf "$dir"
  mkdir -p "$dir"
  tar -xf "$tarball" -C "$dir" --strip-components=1
  cd "$dir"
  export GIT_AUTHOR_NAME="lazyinit-bench" GIT_AUTHOR_EMAIL="ci@lazyinit-bench"
  export GIT_COMMITTER_NAME="lazyinit-bench" GIT_COMMITTER_EMAIL="ci@lazyinit-bench"
  git init -q -b main
  git config core.autocrlf false
  # Objects stored uncompressed: zlib is most of the CPU of hashing a
  # kernel tree into git (about a gigabyte), and the history is a test
  # fixture in the cache, read back by checkouts, never sent anywhere.
  git config core.compression 0
  git config core.looseCompression 0
  # Debian's tree ignores its whole top level (`/*`, for its packaging):
  # everything is added by force.
  at 0
  git add -f -A
  git commit -q -m "Debian linux-source-6.1 as released"
}

at() {
  local d
  d="${history_day}T00:$(printf %02d $(( $1 / 60 ))):$(printf %02d $(( $1 % 60 )))Z"
  export GIT_AUTHOR_DATE="$d" GIT_COMMITTER_DATE="$d"
}
