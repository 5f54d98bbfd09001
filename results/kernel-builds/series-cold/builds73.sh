#!/bin/bash
source <(sed -n '2,10p' /root/sweep/builds.sh)
one x86_64 250 debian:7.3 fix
one x86_64 250 debian:7.3 nofix
one arm64 100 debian:7.3 fix
one arm64 100 debian:7.3 nofix
echo ALLDONE
