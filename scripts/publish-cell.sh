# What a published results folder keeps of one cell folder, sourced by
# scripts/publish-run.sh and by the scripts that publish their own runs
# (scripts/virtual-clock-exact.sh):
#
#   . scripts/publish-cell.sh; publish_cell CELL_DIR [keep-trace]
#
# Compresses groups.csv (every group's trace time and zeroing time), keeps
# the last 60 lines of console.log (console-tail.log), drops trace.txt (the
# raw ftrace text: 5-6 MB per 3 TiB cell; groups.csv carries every group
# event and zeroing it holds) unless `keep-trace` asks for it compressed,
# the cell's sockets, and qemu.stderr when empty.
publish_cell() {
  local cell=${1%/} keep=${2:-}
  [ -f "$cell/groups.csv" ] && gzip -9 -f "$cell/groups.csv"
  if [ -f "$cell/console.log" ]; then
    tail -n 60 "$cell/console.log" >"$cell/console-tail.log"
    rm -f "$cell/console.log"
  fi
  [ "$keep" = keep-trace ] && [ -f "$cell/trace.txt" ] && gzip -9 -f "$cell/trace.txt"
  rm -f "$cell/trace.txt" "$cell"/*.sock
  [ -s "$cell/qemu.stderr" ] || rm -f "$cell/qemu.stderr"
}
