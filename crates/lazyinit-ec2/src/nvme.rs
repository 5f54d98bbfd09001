//! Finding an EBS volume inside a Nitro guest.
//!
//! On Nitro instances (c5, c6g) every EBS volume is an NVMe namespace,
//! whatever device name AttachVolume was given, and the numbering follows
//! probe order. The stable link is the NVMe serial number, which is the
//! volume id without its dash (`vol-0abc` -> `vol0abc`). udev turns it into
//! `/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0abc`; a busybox
//! initramfs has no udev, so [`resolve_script`] reads sysfs instead.

/// The NVMe serial the guest sees for an EBS volume id.
pub fn serial(volume_id: &str) -> String {
    volume_id.replacen("vol-", "vol", 1)
}

/// The udev path of the volume on a systemd guest (the stock AMI).
pub fn by_id_path(volume_id: &str) -> String {
    format!(
        "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_{}",
        serial(volume_id)
    )
}

/// A POSIX sh snippet that prints the block device (`/dev/nvme1n1`) whose
/// NVMe controller serial is the volume's, and exits 1 if there is none.
/// Works under busybox sh with sysfs mounted.
pub fn resolve_script(volume_id: &str) -> String {
    let serial = serial(volume_id);
    // The serial file is space-padded to 20 characters.
    format!(
        "for c in /sys/class/nvme/nvme*; do \
           [ -r \"$c/serial\" ] || continue; \
           s=$(tr -d ' ' < \"$c/serial\"); \
           if [ \"$s\" = '{serial}' ]; then \
             for n in \"$c\"/nvme*n1; do [ -e \"$n\" ] && echo /dev/${{n##*/}} && exit 0; done; \
           fi; \
         done; \
         echo 'no NVMe device with serial {serial}' >&2; exit 1"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_drops_the_dash() {
        assert_eq!(serial("vol-0123456789abcdef0"), "vol0123456789abcdef0");
        assert_eq!(
            by_id_path("vol-0123456789abcdef0"),
            "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0"
        );
    }

    /// Runs the snippet against a fake sysfs tree: the real `sh` and `tr`,
    /// only the root path differs.
    #[test]
    fn resolve_script_finds_the_namespace_by_serial() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (ctrl, ser) in [
            ("nvme0", "vol0root               "),
            ("nvme1", "vol0abc                "),
        ] {
            let c = root.join(ctrl);
            std::fs::create_dir_all(c.join(format!("{ctrl}n1"))).unwrap();
            std::fs::write(c.join("serial"), ser).unwrap();
        }
        let script =
            resolve_script("vol-0abc").replace("/sys/class/nvme/", &format!("{}/", root.display()));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "/dev/nvme1n1\n");

        let missing =
            resolve_script("vol-0zzz").replace("/sys/class/nvme/", &format!("{}/", root.display()));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&missing)
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("vol0zzz"));
    }
}
