//! What a volume's server knows was written, so that a zero request on
//! a file that was all holes punches only what needs it.

use std::fs::File;
use std::io;

/// The byte ranges written since the server started, for a volume that was
/// all holes then: a zero or trim request over ranges never written needs
/// no call into the host filesystem at all. (A punch next to mkfs's
/// metadata took 0.4 ms more than the hold on a 3 TiB volume, straight into
/// the measured z1.)
#[derive(Debug, Default)]
pub(super) struct Extents(std::collections::BTreeMap<u64, u64>);

impl Extents {
    /// Marks [start, end) written, merging with touching ranges.
    pub(super) fn add(&mut self, mut start: u64, mut end: u64) {
        if start >= end {
            return;
        }
        // A range starting at or before `start` that reaches it.
        if let Some((&s, &e)) = self.0.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
                self.0.remove(&s);
            }
        }
        // Ranges starting inside [start, end].
        let inside: Vec<(u64, u64)> = self.0.range(start..=end).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in inside {
            end = end.max(e);
            self.0.remove(&s);
        }
        self.0.insert(start, end);
    }

    /// The written parts of [start, end), which are forgotten (the caller
    /// zeroes them).
    pub(super) fn take(&mut self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut hit = Vec::new();
        let first = self
            .0
            .range(..start)
            .next_back()
            .filter(|(_, &e)| e > start)
            .map(|(&s, _)| s);
        let keys: Vec<u64> = first
            .into_iter()
            .chain(self.0.range(start..end).map(|(&s, _)| s))
            .collect();
        for s in keys {
            let e = self.0.remove(&s).expect("listed");
            let (a, b) = (s.max(start), e.min(end));
            if a < b {
                hit.push((a, b));
            }
            if s < start {
                self.0.insert(s, start);
            }
            if e > end {
                self.0.insert(end, e);
            }
        }
        hit
    }
}

/// Zeroes a range, leaving a hole (a 2 TiB volume must stay sparse).
pub(super) fn zero_range(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use nix::fcntl::{fallocate, FallocateFlags};
    use std::os::fd::AsRawFd;
    fallocate(
        file.as_raw_fd(),
        FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
        offset as i64,
        len as i64,
    )
    .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_merge_and_split() {
        let mut x = Extents::default();
        x.add(10, 20);
        x.add(20, 30); // touching: merged
        x.add(40, 50);
        x.add(45, 60); // overlapping: merged
        assert_eq!(
            x.0.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(),
            vec![(10, 30), (40, 60)]
        );
        assert!(x.take(0, 10).is_empty() && x.take(30, 40).is_empty());
        // Takes the written parts and leaves the rest.
        assert_eq!(x.take(15, 45), vec![(15, 30), (40, 45)]);
        assert_eq!(
            x.0.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(),
            vec![(10, 15), (45, 60)]
        );
        assert_eq!(x.take(0, 100), vec![(10, 15), (45, 60)]);
        assert!(x.0.is_empty());
        x.add(5, 8);
        x.add(1, 100); // swallows
        assert_eq!(
            x.0.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(),
            vec![(1, 100)]
        );
        assert_eq!(x.take(50, 60), vec![(50, 60)]);
        assert_eq!(
            x.0.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(),
            vec![(1, 50), (60, 100)]
        );
    }
}
