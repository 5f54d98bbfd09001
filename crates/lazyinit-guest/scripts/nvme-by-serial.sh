# Prints the block device (/dev/nvme1n1) of the NVMe controller whose serial
# is $1, read from sysfs: a guest without udev (our initramfs after kexec)
# has no /dev/disk/by-id, and nvmeN numbering follows probe order (docs/design.md
# §6). Waits up to $2 seconds for the controller to probe (an attached EBS
# volume can show up after SSH does). Exits 1 naming what it found instead.
want="$1"
wait_s="${2:-60}"
root="${LAZYINIT_SYSFS_NVME:-/sys/class/nvme}"
i=0
while :; do
    found=
    for c in "$root"/nvme*; do
        [ -r "$c/serial" ] || continue
        # The serial file is space-padded to 20 characters; read trims it.
        read -r s < "$c/serial"
        found="$found ${c##*/}=$s"
        [ "$s" = "$want" ] || continue
        # nvme1n1, or nvme1c1n1 (a path of a multipath namespace: the block
        # device is nvme1n1).
        for n in "$c"/nvme*n*; do
            [ -e "$n" ] || continue
            n=${n##*/}
            echo "/dev/$(echo "$n" | sed 's/c[0-9]*n/n/')"
            exit 0
        done
    done
    [ "$i" -ge "$wait_s" ] && break
    sleep 1
    i=$((i + 1))
done
echo "no NVMe namespace with serial $want after ${wait_s}s (controllers:${found:- none})" >&2
exit 1
