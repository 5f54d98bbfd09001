#!/bin/bash
# sequential builds for the series sweep; one line per build with wall + CPU from /proc times
b=/root/sweep/bin
one() { # arch hz source variant
  local t0=$(date +%s.%N)
  if $b kernel build --arch $1 --hz $2 --source $3 --variant $4 --json > /root/sweep/build-$1-$3-$4.json 2> /root/sweep/build-$1-$3-$4.err; then
    python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['manifest']; print(sys.argv[2], m['source'], m.get('debian_package'), m['variant'], 'wall', round(m['build_seconds']), 'cpu', m.get('build_cpu_seconds') and round(m['build_cpu_seconds']), 'ccache', m.get('ccache'))" /root/sweep/build-$1-$3-$4.json "$1"
  else echo "FAILED $1 $3 $4 (see build-$1-$3-$4.err)"; fi
  echo "  outer wall $(python3 -c "print(round($(date +%s.%N)-$t0))") s"
}
one arm64 100 debian:7.2.12 fix
one arm64 100 debian:7.2 fix
one arm64 100 debian:7.2 nofix
one x86_64 250 debian:7.2 nofix
one x86_64 250 debian:7.3 fix
one x86_64 250 debian:7.3 nofix
one arm64 100 debian:7.3 fix
one arm64 100 debian:7.3 nofix
one x86_64 250 debian:6.12 fix
one x86_64 250 debian:6.12 nofix
one arm64 100 debian:6.12 fix
one arm64 100 debian:6.12 nofix
one x86_64 250 debian:5.10 fix
one x86_64 250 debian:5.10 nofix
one arm64 100 debian:5.10 fix
one arm64 100 debian:5.10 nofix
echo ALLDONE
