# mkfs on the small scratch disk that the calibration (and warm-up) mounts
# before the measured mount. Unmeasured work: runs beside the measured mkfs.
set -e
mkfs.ext4 -F -q "$1"
mkdir -p /mnt/warmup
