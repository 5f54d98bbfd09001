#!/usr/bin/env bash
# The bad-input cases of issue 25 run as a user would, one table row each:
# the command, its exit code, its last stderr line, and whether the working
# folder is byte for byte as before (links and devices included).
# Output: results/bad-input/table.md (and command.txt beside it).
#
#   bash scripts/bad-input-table.sh [path/to/lazyinit-bench]
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
out_dir="$repo/results/bad-input"
mkdir -p "$out_dir"
w="$(mktemp -d)"
io="$(mktemp -d)"
trap 'rm -rf "$w" "$io"' EXIT
bin="${1:-}"
if [ -z "$bin" ]; then
  cargo build -q -p lazyinit-bench --features ec2
  # A private copy at once: a shared target folder's binary may be
  # rebuilt from another checkout while the cases run.
  cp "${CARGO_TARGET_DIR:-$repo/target}/debug/lazyinit-bench" "$io/lazyinit-bench"
  bin="$io/lazyinit-bench"
  grep -q "is listed twice" "$bin" || { echo "error: $bin is not this checkout's build" >&2; exit 3; }
fi
cd "$w"

# The working folder: a copy of a finished run and the files the cases use.
cp -r "$repo/crates/lazyinit-report/tests/fixtures/qemu-64g" X
csv=X/results.csv
ln -s results.csv X/link.csv
: >empty.csv
echo old >real.md
ln -s real.md link.md
col() { head -1 "$csv" | tr , '\n' | grep -nx "$1" | cut -d: -f1; }
li=$(col lazyinit_s)
setfirst() { awk -F, -v OFS=, -v i="$li" -v v="$1" 'NR==2{$i=v}1' "$csv" >"$2"; }
setfirst -1 neg.csv
setfirst NaN nan.csv
setfirst inf inf.csv
setfirst abc bad.csv
cut -d, -f"$li" --complement "$csv" >nocol.csv
cp -r X big
for g in big/*/groups.csv; do
  awk -F, -v OFS=, 'NR==1{print;next}{$2=NR "e300"; print}' "$g" >"$g.new" && mv "$g.new" "$g"
done
spec() { printf 'name = "t"\nhz = [250]\n%s\n' "$2" >"$1"; }
spec dup-arch.toml 'arches = ["x86_64", "x86_64"]
sizes = ["8GiB"]'
spec dup-size.toml 'arches = ["x86_64"]
sizes = ["2TiB", "2048GiB"]'
spec neg-size.toml 'arches = ["x86_64"]
sizes = [-1]'
sizes=$(seq -s, -f '"%.0fTiB"' 16777055 16777215)
spec overflow.toml "arches = [\"x86_64\", \"arm64\"]
variants = [\"fix\", \"nofix\"]
repetitions = 25
sizes = [$sizes]"
sizes=$(seq -s, -f '"%.0fGiB"' 8 168)
spec many.toml "arches = [\"x86_64\", \"arm64\"]
variants = [\"fix\", \"nofix\"]
repetitions = 25
sizes = [$sizes]"
echo x >afile
ln -s loop2.csv loop1.csv
ln -s loop1.csv loop2.csv
mkdir adir

snapshot() {
  find . -printf '%p %y %l %s %m\n' | sort
  find . -type f -exec md5sum {} + | sort
}

rows=()
row() { # row DESCRIPTION COMMAND...
  local desc="$1"
  shift
  local before after code changed err
  before="$(snapshot)"
  set +e
  "$@" >"$io/stdout" 2>"$io/stderr"
  code=$?
  set -e
  after="$(snapshot)"
  changed=no
  [ "$before" = "$after" ] || changed=YES
  # The last line, but clap's own last line is its help hint: its
  # `error:` line above it says what was wrong.
  err="$( (grep -v -e '^left out ' -e '^\s*$' -e "^For more information, try '--help'" "$io/stderr" || true) | tail -1 | sed 's/|/\\|/g')"
  [ -n "$err" ] || err="(stdout: $(head -c 120 "$io/stdout" | tr '\n' ' ' | sed 's/|/\\|/g'))"
  rows+=("| $desc | $code | $err | $changed |")
}
b="$bin"
cell=(--arch x86_64 --hz 250 --variant fix --size 8GiB)

row '`replay X/results.csv --out X/results.csv`' $b replay $csv --out $csv
row '`replay X/results.csv --out X/link.csv` (a symlink to the input)' $b replay $csv --out X/link.csv
row '`report X/results.csv --out X/link.csv`' $b report $csv --out X/link.csv
row '`replay empty.csv --out r.md`' $b replay empty.csv --out r.md
row '`report X/results.csv --out link.md` (symlink to real.md: written through, stays a link)' $b report $csv --out link.md
[ -L link.md ] && grep -q '| cell' real.md && rows[-1]="${rows[-1]% |} (real.md holds the report; link.md still a link) |"
row '`report X/results.csv --out /dev/stdout`' $b report $csv --out /dev/stdout
row '`report X/results.csv --out /dev/null`' $b report $csv --out /dev/null
row '`compare --baseline X --candidate` one with `lazyinit_s` = -1' $b compare --baseline $csv --candidate neg.csv
row '`compare` with a NaN candidate' $b compare --baseline $csv --candidate nan.csv
row '`report` of a CSV without the `lazyinit_s` column' $b report nocol.csv
row '`report` with `lazyinit_s` = NaN' $b report nan.csv
row '`report` with `lazyinit_s` = inf' $b report inf.csv
row '`report --format kcidb` with `lazyinit_s` = -1' $b report neg.csv --format kcidb
row '`replay` with `lazyinit_s` = -1' $b replay neg.csv
row 'spec `arches = ["x86_64", "x86_64"]` (`plan`)' $b plan dup-arch.toml
row 'spec `sizes = ["2TiB", "2048GiB"]` (`plan`)' $b plan dup-size.toml
row '`run quick --repetitions 0 --out res`' $b run quick --repetitions 0 --out res
row '`plan quick --repetitions 4294967295`' $b plan quick --repetitions 4294967295
row '`plan quick --concurrency 100000`' $b plan quick --concurrency 100000
row '`plan quick --estimate-after 100000000000`' $b plan quick --estimate-after 100000000000
row 'spec of 16,100 cells of ~16777215TiB (`plan`)' $b plan overflow.toml
row 'spec of 16,100 cells of 8-168GiB (`plan`)' $b plan many.toml
row '`report big/results.csv` (groups.csv times of 1e300)' $b report big/results.csv
row '`replay big/results.csv` (groups.csv times of 1e300)' $b replay big/results.csv
inj=$'/x"]\nrepetitions = 7\nsources = ["debian-6.1'
row '`plan --source '"'"'/x"]<newline>repetitions = 7 ...'"'"'` (one cell, no injected key)' $b plan "${cell[@]}" --source "$inj"
row '`run quick --out afile` (a file)' $b run quick --out afile
row '`run quick --out /dev/null`' $b run quick --out /dev/null
row '`run quick --out /proc/x`' $b run quick --out /proc/x
row '`run quick --out /sys/x` (read-only for root too)' $b run quick --out /sys/x
row '`report X/results.csv --out adir` (a directory)' $b report $csv --out adir
row '`report X/results.csv --svg no/such/p.svg`' $b report $csv --svg no/such/p.svg
row '`kernel build --config /nonexistent ...`' $b kernel build --arch x86_64 --hz 250 --variant fix --config /nonexistent --cache-dir cache
row '`report missing.csv`' $b report missing.csv
row '`report loop1.csv` (a symlink loop)' $b report loop1.csv
row '`report adir` (a directory)' $b report adir
row 'spec `sizes = [-1]` (`plan`)' $b plan neg-size.toml
row 'CSV value error on the first data row (`report bad.csv`)' $b report bad.csv
# Issue 41: a PostgreSQL that accepts and never answers (a loopback
# listener holding each socket; python3 is on every host that runs this).
silent_port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
python3 -c 'import socket,sys,time
s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)
s.bind(("127.0.0.1",int(sys.argv[1])));s.listen(8);s.settimeout(30);h=[]
t=time.time()
while time.time()-t<30:
  try: h.append(s.accept())
  except OSError: break' "$silent_port" &
silent_pid=$!
sleep 0.5
row '`history show --db postgres://u@127.0.0.1:PORT/h?connect_timeout=2` (a server that never answers)' $b history show --db "postgres://u@127.0.0.1:$silent_port/h?connect_timeout=2"
row '`history changes --db postgres://u@127.0.0.1:PORT/h` (never answers; 10 s default)' $b history changes --db "postgres://u@127.0.0.1:$silent_port/h"
kill "$silent_pid" 2>/dev/null || true
setfirst 1.7e308 huge.csv
row '`report huge.csv --svg h.svg` (`lazyinit_s` = 1.7e308)' $b report huge.csv --svg h.svg
row '`plan quick --shards 100000`' $b plan quick --shards 100000
row '`plan quick --shards 4294967295`' $b plan quick --shards 4294967295
row '`plan quick --shard 1/100000`' $b plan quick --shard 1/100000
row '`plan quick --shard auto` with JOB_COMPLETION_INDEX=18446744073709551615' env JOB_COMPLETION_INDEX=18446744073709551615 LAZYINIT_SHARD_COUNT=4 $b plan quick --shard auto
row '`history changes --db sqlite:h.db --min-change-pct=inf`' $b history changes --db sqlite:h.db --min-change-pct=inf
mkfifo fifo.csv fifo.toml
truncate -s 268435457 big-sparse.csv
row '`report fifo.csv` (a FIFO)' $b report fifo.csv
row '`report /dev/zero`' $b report /dev/zero
row '`report big-sparse.csv` (256 MiB + 1 byte)' $b report big-sparse.csv
row '`plan fifo.toml` (a FIFO)' $b plan fifo.toml
row '`plan /dev/zero`' $b plan /dev/zero
row '`bisect-step --no-such-flag` (must be 255, git bisect run'"'"'s abort)' $b bisect-step --no-such-flag
# Issue 41: strings of a site's --data are text, never markup or a
# script link; the site goes outside the working folder, and what reached
# its pages is counted after the row.
site_json="$repo/crates/lazyinit-site/tests/fixtures"
python3 - "$site_json/sample.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["unit"] = "<script>window.__pwned=1</script>"
json.dump(d, open("unit.json", "w"))
d = json.load(open(sys.argv[1]))
d["latest"]["link"] = "javascript:alert(1)"
for s in d["series"]:
    for p in s["points"]:
        p["link"] = "JaVaScRiPt:alert(2)"
json.dump(d, open("jslink.json", "w"))
PY
cp "$site_json/hostile.json" hostile.json
site_said() { # what the pages hold that they must not
  local n_script n_js
  # grep finds none in a safe site (exit 1): counted as 0, not an error.
  n_script=$(cat "$io/site"/index.html "$io/site"/series/*.html | { grep -oi '<script' || true; } | wc -l)
  n_js=$(cat "$io/site"/index.html "$io/site"/series/*.html | { grep -oiE 'href="[[:space:]]*(javascript|data|vbscript):' || true; } | wc -l)
  rows[-1]="${rows[-1]% |} ($n_script \`<script\`, $n_js script links in the pages) |"
}
row '`history publish --data unit.json` (`unit` = `<script>...`)' $b history publish --data unit.json --out "$io/site"
site_said
row '`history publish --data jslink.json` (run links `javascript:...`)' $b history publish --data jslink.json --out "$io/site"
site_said
row '`history publish --data hostile.json` (every text `<script>` and `"><img onerror>`, bad links)' $b history publish --data hostile.json --out "$io/site"
site_said
row '`plan quick --shard auto` with JOB_COMPLETION_INDEX=`3<newline>error: fake`' env JOB_COMPLETION_INDEX=$'3\nerror: fake' LAZYINIT_SHARD_COUNT=4 $b plan quick --shard auto
row '`plan quick --shard auto` with CI_NODE_INDEX=5, CI_NODE_TOTAL=4' env CI_NODE_INDEX=5 CI_NODE_TOTAL=4 $b plan quick --shard auto
row '`plan quick --shard auto` with SLURM_ARRAY_TASK_ID=3 of 4 in steps of 2' env SLURM_ARRAY_TASK_ID=3 SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_STEP=2 $b plan quick --shard auto
row '`plan quick --shard auto` with CI_NODE_INDEX=1 and no CI_NODE_TOTAL' env CI_NODE_INDEX=1 $b plan quick --shard auto
# Issue 52: a run's evidence is the output of nothing but its run (any
# command, any output flag, through links, `..`, /proc and hard links); two
# outputs of one command are never one file; a merge over an earlier one
# keeps or refuses what the user put there; a cell id never leaves its run.
c52=$(cd X && ls -d qemu-*/ | head -1); c52=${c52%/}
cp "$site_json/sample.json" sample.json
row '`history publish --data sample.json --save-data X/results.csv`' $b history publish --data sample.json --out "$io/site52" --save-data X/results.csv
row '`history check X --out X/events.jsonl`' $b history check X --db sqlite:h52.sqlite --out X/events.jsonl
row '`report X/results.csv --out r52.md --svg r52.md` (two outputs, one file)' $b report $csv --out r52.md --svg r52.md
row '`report X/results.csv --out X/CELL/notes.md` (inside a cell folder)' $b report $csv --out "X/$c52/notes.md"
row '`report X/results.csv --out /proc/self/cwd/X/results.csv`' $b report $csv --out /proc/self/cwd/X/results.csv
ln "X/$c52/groups.csv" hard52.txt
row '`replay X/results.csv --out hard52.txt` (a hard link to a cell'"'"'s groups.csv)' $b replay $csv --out hard52.txt
row '`history import --db sqlite:X/CELL/h.sqlite X` (a history inside a cell folder)' $b history import --db "sqlite:X/$c52/h.sqlite" X
cp -r "$repo/results/quick-shards/shard-1-of-2" s1
cp -r "$repo/results/quick-shards/shard-2-of-2" s2
"$b" merge s1 --out m52 --allow-missing 2>/dev/null
echo mine >m52/notes.txt
c2=$(cd s2 && ls -d qemu-*/ | head -1); c2=${c2%/}
mkdir "m52/$c2" && echo mine >"m52/$c2/mine.txt"
row '`merge s1 s2 --out m52` (an earlier merge with a folder of the user'"'"'s where a new cell goes)' $b merge s1 s2 --out m52
mkdir ev52
awk -F, -v OFS=, 'NR==1{for(i=1;i<=NF;i++) if($i=="cell_id") c=i} NR==2{$c="../../../../etc"}1' "$csv" >ev52/results.csv
row '`report --format kcidb ev52/results.csv` (cell_id `../../../../etc`)' $b report --format kcidb ev52/results.csv
# Issue 52, the history (third pass): dates against now, a baseline that
# chooses nothing, thresholds and counts in range, a run in progress
# skipped, a PostgreSQL URL's parameters named. H52 is a committed run
# (spec.toml beside its results.csv); hb.sqlite holds it.
cp -r "$repo/results/l-stability-timer/matrix-1" H52
"$b" history import --db sqlite:hb.sqlite H52 >/dev/null
cp -r H52 fut52
sed -i 's/,20[0-9][0-9]-\([0-9][0-9]-[0-9][0-9]T\)/,2100-\1/g' fut52/results.csv
row '`history import fut52` (rows dated 2100)' $b history import --db sqlite:hb.sqlite fut52
row '`history check H52 --baseline run:nosuch@2026-01-01T00:00:00Z`' $b history check H52 --db sqlite:hb.sqlite --baseline run:nosuch@2026-01-01T00:00:00Z
row '`history check H52 --baseline date:2026-12-01..2026-11-01` (reversed)' $b history check H52 --db sqlite:hb.sqlite --baseline date:2026-12-01..2026-11-01
row '`history check H52 --baseline kernel:9.99`' $b history check H52 --db sqlite:hb.sqlite --baseline kernel:9.99
row '`history changes --run-min-change-pct inf`' $b history changes --db sqlite:hb.sqlite --run-min-change-pct inf
row '`history check H52 --run-min-change-pct 1e308`' $b history check H52 --db sqlite:hb.sqlite --run-min-change-pct 1e308
row '`history generate --runs 18446744073709551615`' $b history generate --db sqlite:g52.sqlite --runs 18446744073709551615
row '`history generate --runs 10000000`' $b history generate --db sqlite:g52.sqlite --runs 10000000
row '`history generate --db sqlite:hb.sqlite --runs 3` (a history of real runs)' $b history generate --db sqlite:hb.sqlite --runs 3
cp -r H52 live52
head -1 H52/results.csv >live52/results.csv
: >live52/.lock
flock -x --no-fork live52/.lock sleep 30 &
live_pid=$!
sleep 0.5
row '`history import --db sqlite:hi52.sqlite H52 live52` (live52: a run in progress, its .lock held)' $b history import --db sqlite:hi52.sqlite H52 live52
row '`history check live52` (a run in progress, its .lock held)' $b history check live52 --db sqlite:hc61.sqlite
kill "$live_pid" 2>/dev/null || true
wait "$live_pid" 2>/dev/null || true
row '`history show --db postgres://u@127.0.0.1:1/h?connect_timeout=99999999999`' $b history show --db 'postgres://u@127.0.0.1:1/h?connect_timeout=99999999999'
row '`history show --db postgres://u@127.0.0.1:1/h?connect_timeout=abc`' $b history show --db 'postgres://u@127.0.0.1:1/h?connect_timeout=abc'
row '`history show --db postgres://u@127.0.0.1:1/h?foo=1` (an unknown parameter)' $b history show --db 'postgres://u@127.0.0.1:1/h?foo=1'
# Issue 52, the rest of the third pass: `run --history` opened before
# anything runs, an older harness's results folder as `run --out`,
# `knobs` as a list, a shard index outside its count in each engine's
# words, `--save-data` inside the site, and (with LAZYINIT_TEST_POSTGRES,
# whose `postgres` role logs in on trust as scripts/history-postgres.sh
# sets up) a PostgreSQL role that may only read.
row '`run quick --out res52 --history sqlite:nofolder/h.sqlite`' $b run quick --out res52 --history sqlite:nofolder/h.sqlite
row '`run quick --out res52 --history sqlite:afile` (a text file)' $b run quick --out res52 --history sqlite:afile
row '`run quick --out res52 --history postgres://u@127.0.0.1:1/h?connect_timeout=2` (no server)' $b run quick --out res52 --history 'postgres://u@127.0.0.1:1/h?connect_timeout=2'
mkdir old52
cp "$repo/results/reported-6.1-n3/results.csv" "$repo/results/reported-6.1-n3/command.txt" old52/
row '`run quick --out old52` (a results folder of an older harness: 37 columns)' $b run quick --out old52
spec knobs52.toml 'arches = ["x86_64"]
sizes = ["8GiB"]
knobs = [512]'
row 'spec `knobs = [512]` (`plan`)' $b plan knobs52.toml
row '`plan quick --shard auto` with JOB_COMPLETION_INDEX=4, LAZYINIT_SHARD_COUNT=4' env JOB_COMPLETION_INDEX=4 LAZYINIT_SHARD_COUNT=4 $b plan quick --shard auto
row '`plan quick --shard auto` with CI_NODE_INDEX=0, CI_NODE_TOTAL=4' env CI_NODE_INDEX=0 CI_NODE_TOTAL=4 $b plan quick --shard auto
row '`plan quick --shard auto` with SLURM_ARRAY_TASK_ID=5 of 4 from 1' env SLURM_ARRAY_TASK_ID=5 SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_COUNT=4 $b plan quick --shard auto
row '`plan quick --shard auto` with LAZYINIT_SHARD=5/4 (a GitHub matrix)' env LAZYINIT_SHARD=5/4 $b plan quick --shard auto
row '`history publish --data sample.json --out site --save-data site/data.json`' $b history publish --data sample.json --out "$io/site52b" --save-data "$io/site52b/data.json"
# Issue 61: the cache trusted before anything in it runs, one preflight
# for plan and run, a full results disk, knob-owned mkfs flags. Each is
# refused before any guest or build (the full disk after the folder's
# first files: a 4 KiB tmpfs, mounted here as root).
"$b" history generate --db sqlite:g61.sqlite --runs 3 >/dev/null 2>&1
row '`history generate --db sqlite:g61.sqlite --runs 5 --seed 3` (a history generated with seed 28)' $b history generate --db sqlite:g61.sqlite --runs 5 --seed 3
row '`kernel list` with LAZYINIT_CACHE_DIR=afile (a file)' env LAZYINIT_CACHE_DIR="$PWD/afile" $b kernel list
row '`qemu build --cache-dir X` (a finished results folder)' $b qemu build --cache-dir "$PWD/X"
ln -s /etc etc61
row '`kernel list` with LAZYINIT_CACHE_DIR=etc61 (a link to /etc)' env LAZYINIT_CACHE_DIR="$PWD/etc61" $b kernel list
mkdir -p "$io/shared61"
chown nobody "$io/shared61" && chmod 0777 "$io/shared61"
row '`run quick` with LAZYINIT_CACHE_DIR a folder of `nobody`, mode 0777' env LAZYINIT_CACHE_DIR="$io/shared61" $b run quick --out res61
mkdir -p "$io/notcache61" && echo mine >"$io/notcache61/notes.txt"
row '`kernel list --cache-dir` a folder of other files (no cache marker)' $b kernel list --cache-dir "$io/notcache61"
virt61() { spec "$1" "arches = [\"x86_64\"]
sizes = [\"8GiB\"]
storage-profile = \"$2\"
[provider-config.qemu]
clock = \"virtual\"
$3"; }
virt61 kvm61.toml ebs 'accel = "kvm"'
virt61 none61.toml none ''
virt61 unsafe61.toml unsafe ''
virt61 iops61.toml iops:100 ''
row 'spec clock virtual, accel kvm (`plan`)' $b plan kvm61.toml
row 'spec clock virtual, accel kvm (`run`)' $b run kvm61.toml --out res61
row 'spec clock virtual, storage `none` (`plan`)' $b plan none61.toml
row 'spec clock virtual, storage `unsafe` (`run`)' $b run unsafe61.toml --out res61
row 'spec clock virtual, storage `iops:100` (`plan`)' $b plan iops61.toml
spec mkfs61.toml 'arches = ["x86_64"]
sizes = ["8GiB"]
mkfs-args = ["-I", "512"]'
row 'spec `mkfs-args = ["-I", "512"]` (`plan`)' $b plan mkfs61.toml
# A real guest that cannot boot in 1 s (the cell's line names the flag).
row '`run` one cell `--clock virtual --boot-timeout 1`' $b run "${cell[@]}" --clock virtual --boot-timeout 1 --out "$io/boot61"
bt="$(grep -m1 -e '--boot-timeout' "$io/stderr" | sed 's/|/\\|/g' || true)"
rows[-1]="${rows[-1]% |} (the cell: ${bt:-no line names --boot-timeout}) |"
mkdir -p "$io/small61"
if mount -t tmpfs -o size=4k lazyinit-bad-input "$io/small61" 2>/dev/null; then
  row '`run quick --clock virtual --out` a full disk (a 4 KiB tmpfs)' $b run quick --clock virtual --out "$io/small61/res"
  umount -l "$io/small61"
fi
if [ -n "${LAZYINIT_TEST_POSTGRES:-}" ]; then
  pg_base="${LAZYINIT_TEST_POSTGRES%/*}"
  pg_admin="${pg_base/:\/\/*@/://postgres@}"
  db52="bad_input_ro_$$"
  ro52="ro52_$$"
  psql -q "$LAZYINIT_TEST_POSTGRES" -c "CREATE DATABASE $db52"
  "$b" history import --db "$pg_base/$db52" H52 >/dev/null
  psql -q "$pg_admin/$db52" -c "CREATE ROLE $ro52 LOGIN; GRANT SELECT ON ALL TABLES IN SCHEMA public TO $ro52"
  row '`history import --db postgres://ROLE:PASSWORD@HOST/DB H52` (a role that may only read)' $b history import --db "${pg_base/:\/\/*@/://$ro52:secret@}/$db52" H52
  psql -q "$pg_admin/$db52" -c "DROP OWNED BY $ro52; DROP ROLE $ro52"
  psql -q "$LAZYINIT_TEST_POSTGRES" -c "DROP DATABASE $db52"
fi

{
  echo "# Bad input: every case of issue 25 (CLI, CSV and spec edges)"
  echo
  echo "Generated by \`bash scripts/bad-input-table.sh\` on $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "($("$b" --version)). *changed*: whether any file, link or folder of"
  echo "the working folder differs afterwards (contents, kind, mode, target)."
  echo
  echo "| what a user does | exit | last stderr line | changed |"
  echo "|---|---:|---|---|"
  printf '%s\n' "${rows[@]}"
} >"$out_dir/table.md"
echo "bash scripts/bad-input-table.sh $*" >"$out_dir/command.txt"
cat "$out_dir/table.md"
