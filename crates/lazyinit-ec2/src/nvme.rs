//! Finding an EBS volume inside a Nitro guest.
//!
//! On Nitro instances (c5, c6g) every EBS volume is an NVMe namespace,
//! whatever device name AttachVolume was given, and the numbering follows
//! probe order. The stable link is the NVMe serial number, which is the
//! volume id without its dash (`vol-0abc` -> `vol0abc`). udev turns it into
//! `/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0abc`, but the guest
//! after kexec is our busybox initramfs, which has no udev: it finds the
//! device by this serial in sysfs (`lazyinit_guest::volume`).

/// The NVMe serial the guest sees for an EBS volume id.
pub fn serial(volume_id: &str) -> String {
    volume_id.replacen("vol-", "vol", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_drops_the_dash() {
        assert_eq!(serial("vol-0123456789abcdef0"), "vol0123456789abcdef0");
        // NVMe serials hold 20 characters: an EBS id's is exactly that.
        assert_eq!(serial("vol-0123456789abcdef0").len(), 20);
    }
}
