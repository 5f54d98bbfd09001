//! Ids, test paths and file URLs: pure text, from CSV fields only, so that
//! exporting the same rows again gives the same ids (KCIDB merges objects
//! of one origin by id: a resubmission updates instead of duplicating).

use std::path::Path;

use lazyinit_core::results::ResultRow;
use lazyinit_core::ByteSize;

/// What KCIDB allows as an origin (`origin_pattern` of the schema).
pub fn check_origin(origin: &str) -> Result<(), String> {
    let ok = !origin.is_empty()
        && origin
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "origin `{origin}` is not a KCIDB origin name: use lowercase letters, digits and \
             underscores (for example lazyinit_bench)"
        ))
    }
}

/// An id's part after `origin:`: any text on one line.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '_' } else { c })
        .collect()
}

/// A component of a dot-separated test path: `[A-Za-z0-9_-]+`.
fn path_part(s: &str) -> String {
    let p: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if p.is_empty() {
        "_".into()
    } else {
        p
    }
}

/// The source version of a kernel release: `6.1.192` of
/// `6.1.192-lazyinit-hz250-fix` (the harness's localversion is stripped);
/// a release without that suffix is kept whole.
pub fn source_version(row: &ResultRow, release: &str) -> Option<String> {
    if release.is_empty() {
        return None;
    }
    let local = format!("-lazyinit-hz{}-{}", row.axes.hz, row.axes.variant);
    Some(release.strip_suffix(&local).unwrap_or(release).to_string())
}

/// `origin:debian-6.1@6.1.192+nofix`: one source at one version with one
/// variant (its patch set).
pub fn checkout_id(origin: &str, row: &ResultRow, release: &str) -> String {
    let version = source_version(row, release)
        .map(|v| format!("@{v}"))
        .unwrap_or_default();
    one_line(&format!(
        "{origin}:{}{version}+{}",
        row.axes.source, row.axes.variant
    ))
}

/// `origin:debian-6.1@6.1.192+nofix/x86_64/hz250/qemu`. The provider stands
/// for the kernel profile (the harness builds `cloud` kernels for EC2 and
/// `qemu` kernels otherwise), which the CSV does not name.
pub fn build_id(origin: &str, row: &ResultRow, release: &str) -> String {
    format!(
        "{}/{}/hz{}/{}",
        checkout_id(origin, row, release),
        row.axes.arch,
        row.axes.hz,
        one_line(row.testbed.provider.as_str())
    )
}

/// `origin:<run_id>/<cell_id>/<started_at>/<metric>`: one metric of one
/// cell run. A resumed run reruns a failed cell under the same cell id;
/// the start time tells the two runs apart.
pub fn test_id(origin: &str, row: &ResultRow, metric: &str) -> String {
    one_line(&format!(
        "{origin}:{}/{}/{}/{metric}",
        row.run_id, row.cell_id, row.started_at
    ))
}

/// `ext4.lazyinit.2TiB.lazyinit_s`; a wait multiplier other than the
/// kernel's default 10 is part of the test: `ext4.lazyinit.2TiB-init_itable-20.lazyinit_s`,
/// and so is each field of the key's table after the first (a knob) off
/// its default, by its label word (`ext4.lazyinit.2TiB-inode128.lazyinit_s`:
/// two values of a knob on one build are two tests), and an early-stop
/// estimate, a series of its own beside the measurements:
/// `ext4.lazyinit.2TiB-estimate.lazyinit_s`.
pub fn test_path(row: &ResultRow, metric: &str) -> String {
    let mut size = path_part(&ByteSize(row.axes.volume.0).to_string());
    if row.axes.wait_mult != lazyinit_core::cell::DEFAULT_WAIT_MULT {
        size.push_str(&format!("-init_itable-{}", row.axes.wait_mult));
    }
    let key = lazyinit_core::identity::CellKey::of(row);
    for f in key.off_default() {
        size.push('-');
        size.push_str(&path_part(&(f.word)(&key)));
    }
    if row.measured.estimated {
        size.push_str("-estimate");
    }
    format!("ext4.lazyinit.{size}.{}", path_part(metric))
}

/// `file://` URL of an absolute local path, percent-encoding what a URI
/// path may not hold.
pub fn file_url(path: &Path) -> String {
    let mut s = String::from("file://");
    for b in path.to_string_lossy().bytes() {
        let keep = b.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&b);
        if keep {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// KCIDB's patch set hash: sha256 over each patch's sha256 hex and a newline
/// (`sha256sum *.patch | cut -c-64 | sha256sum`); "" for no patch.
pub fn patchset_hash(patch_sha256s: &[&str]) -> String {
    if patch_sha256s.is_empty() {
        return String::new();
    }
    let lines: String = patch_sha256s.iter().map(|h| format!("{h}\n")).collect();
    lazyinit_core::paths::sha256_hex(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::tests_support::row;

    #[test]
    fn origin_follows_the_schema() {
        assert!(check_origin("lazyinit_bench").is_ok());
        assert!(check_origin("aws_ec2_lab2").is_ok());
        for bad in ["", "Lazy", "lazy-init", "a:b", "a b"] {
            assert!(check_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ids_name_source_version_variant_arch_hz_and_provider() {
        let mut r = row("debian-6.1", 60.0);
        r.kernel_release = "6.1.192-lazyinit-hz100-nofix".into();
        let rel = r.kernel_release.clone();
        assert_eq!(checkout_id("o", &r, &rel), "o:debian-6.1@6.1.192+nofix");
        assert_eq!(
            build_id("o", &r, &rel),
            "o:debian-6.1@6.1.192+nofix/x86_64/hz100/qemu"
        );
        assert_eq!(checkout_id("o", &r, ""), "o:debian-6.1+nofix");
        // A release the harness did not name is kept whole.
        assert_eq!(
            source_version(&r, "6.1.0-13-amd64").unwrap(),
            "6.1.0-13-amd64"
        );
        r.started_at = "2026-11-29T19:00:00Z".into();
        assert_eq!(
            test_id("o", &r, "lazyinit_s"),
            "o:r/qemu-x86_64-debian-6.1-hz100-nofix-64GiB-r1/2026-11-29T19:00:00Z/lazyinit_s"
        );
        r.run_id = "a\nb".into();
        assert!(!test_id("o", &r, "x").contains('\n'));
    }

    #[test]
    fn paths_are_dot_separated_words() {
        let mut r = row("debian-6.1", 60.0);
        assert_eq!(
            test_path(&r, "ms_per_group"),
            "ext4.lazyinit.64GiB.ms_per_group"
        );
        r.axes.wait_mult = 20;
        r.axes.volume.0 = 2 << 40;
        assert_eq!(
            test_path(&r, "lazyinit_s"),
            "ext4.lazyinit.2TiB-init_itable-20.lazyinit_s"
        );
        r.axes.wait_mult = 10;
        r.axes.volume.0 = 1000;
        assert_eq!(test_path(&r, "a.b"), "ext4.lazyinit.1000.a_b");
    }

    /// Two values of a knob on one build are two tests: the path names
    /// each knob off its default by its word, from the key's table, and
    /// nothing at the defaults.
    #[test]
    fn two_values_of_a_knob_are_two_test_paths() {
        let plain = row("debian-6.1", 60.0);
        let mut small = plain.clone();
        small.axes.knobs.inode_size = lazyinit_core::identity::knobs::InodeSize(128);
        assert_eq!(
            test_path(&plain, "lazyinit_s"),
            "ext4.lazyinit.64GiB.lazyinit_s"
        );
        assert_eq!(
            test_path(&small, "lazyinit_s"),
            "ext4.lazyinit.64GiB-inode128.lazyinit_s"
        );
        small.axes.wait_mult = 20;
        small.measured.estimated = true;
        assert_eq!(
            test_path(&small, "lazyinit_s"),
            "ext4.lazyinit.64GiB-init_itable-20-inode128-estimate.lazyinit_s"
        );
    }

    #[test]
    fn file_urls_are_encoded() {
        assert_eq!(
            file_url(Path::new("/r/a b/console.log")),
            "file:///r/a%20b/console.log"
        );
    }

    #[test]
    fn patchset_hash_matches_the_shell_recipe() {
        // printf 'aa..a\n' | sha256sum (64 a's).
        let a = "a".repeat(64);
        assert_eq!(
            patchset_hash(&[&a]),
            lazyinit_core::paths::sha256_hex(format!("{a}\n"))
        );
        assert_eq!(patchset_hash(&[]), "");
    }
}
