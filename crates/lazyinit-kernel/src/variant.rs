//! The fix's presence, read from the source text, and the patches that
//! switch a tree between the two variants.
//!
//! Which patch to apply is chosen from the tree's version, but what decides
//! is the text: the released tree is classified before patching and the
//! patched tree after, and a build whose text does not say the asked variant
//! fails.

use lazyinit_core::Variant;
use serde::{Deserialize, Serialize};

/// What `ext4_run_li_request` does with the first group's zeroing time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Detected {
    /// Measured in nanoseconds (`ktime_get_real_ns`, or `ktime_get_ns` after
    /// e06a8c24f644) and converted with `nsecs_to_jiffies`: the fix.
    Fix,
    /// Measured in jiffies: the bug.
    NoFix,
    /// Neither form: a tree this harness does not know how to classify.
    Unknown,
}

impl Detected {
    pub fn variant(self) -> Option<Variant> {
        match self {
            Detected::Fix => Some(Variant::Fix),
            Detected::NoFix => Some(Variant::NoFix),
            Detected::Unknown => None,
        }
    }
}

/// The text of `ext4_run_li_request` in `fs/ext4/super.c`, from its
/// signature to the closing brace at the start of a line.
pub fn function_text(super_c: &str) -> Option<&str> {
    let start = super_c.find("static int ext4_run_li_request(")?;
    let rest = &super_c[start..];
    let end = rest.find("\n}\n")?;
    Some(&rest[..end + 3])
}

/// Classify the function text (see [`function_text`]).
pub fn detect(function: &str) -> Detected {
    // Comments could mention either form; look at code only.
    let code: String = function
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .filter(|l| !l.trim_start().starts_with('*') && !l.trim_start().starts_with("/*"))
        .collect::<Vec<_>>()
        .join("\n");
    let ns_clock = code.contains("ktime_get_real_ns()") || code.contains("ktime_get_ns()");
    let fix = ns_clock && code.contains("nsecs_to_jiffies(");
    let nofix = code.contains("timeout = jiffies;") && code.contains("(jiffies - timeout)");
    match (fix, nofix) {
        (true, false) => Detected::Fix,
        (false, true) => Detected::NoFix,
        _ => Detected::Unknown,
    }
}

/// Classify a whole `fs/ext4/super.c`.
pub fn detect_file(super_c: &str) -> Detected {
    function_text(super_c).map_or(Detected::Unknown, detect)
}

/// How the asked variant was made from the released tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// The released tree already is the asked variant.
    AsReleased,
    /// The released tree carries the fix; a patch reverts it.
    Reverted,
    /// The released tree predates the fix; a patch applies it forward.
    AppliedForward,
    /// Built as committed, though its text is not the asked variant's
    /// (a bisect's commit: the variant is then only a label).
    AsCommitted,
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Method::AsReleased => "as-released",
            Method::Reverted => "reverted",
            Method::AppliedForward => "applied-forward",
            Method::AsCommitted => "as-committed",
        })
    }
}

/// One variant patch under `kernels/patches/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patch {
    pub name: &'static str,
    /// `X.Y` of the series it was written against.
    pub series: &'static str,
    /// Reverted (fix -> nofix) or AppliedForward (nofix -> fix).
    pub method: Method,
    pub text: &'static str,
}

pub const PATCHES: [Patch; 6] = [
    Patch {
        name: "debian-6.1-revert-fix.patch",
        series: "6.1",
        method: Method::Reverted,
        text: include_str!("../../../kernels/patches/debian-6.1-revert-fix.patch"),
    },
    Patch {
        name: "debian-6.12-revert-fix.patch",
        series: "6.12",
        method: Method::Reverted,
        text: include_str!("../../../kernels/patches/debian-6.12-revert-fix.patch"),
    },
    Patch {
        name: "debian-7.2-revert-fix.patch",
        series: "7.2",
        method: Method::Reverted,
        text: include_str!("../../../kernels/patches/debian-7.2-revert-fix.patch"),
    },
    Patch {
        name: "debian-5.10-revert-fix.patch",
        series: "5.10",
        method: Method::Reverted,
        text: include_str!("../../../kernels/patches/debian-5.10-revert-fix.patch"),
    },
    Patch {
        name: "5.10-apply-fix.patch",
        series: "5.10",
        method: Method::AppliedForward,
        text: include_str!("../../../kernels/patches/5.10-apply-fix.patch"),
    },
    Patch {
        name: "5.4-apply-fix.patch",
        series: "5.4",
        method: Method::AppliedForward,
        text: include_str!("../../../kernels/patches/5.4-apply-fix.patch"),
    },
];

/// `X.Y` of a kernel version `X.Y[.Z][-extra]`.
pub fn series_of(version: &str) -> String {
    version.split('.').take(2).collect::<Vec<_>>().join(".")
}

/// A tree built as committed: as released when its text is `wanted`'s
/// (the same kernel, the same cache key), else as committed; never a patch.
pub fn plan_as_committed(released: Detected, wanted: Variant) -> (Method, Vec<Patch>) {
    if released.variant() == Some(wanted) {
        (Method::AsReleased, Vec::new())
    } else {
        (Method::AsCommitted, Vec::new())
    }
}

/// What to do to a released tree (classified as `released`) to get `wanted`:
/// the method, and the patches to try in order (the tree's own series first,
/// then the others of the same direction; the first that applies cleanly is
/// used, and the text check after patching decides).
pub fn plan(
    released: Detected,
    wanted: Variant,
    version: &str,
) -> Result<(Method, Vec<Patch>), String> {
    let method = match (released, wanted) {
        (Detected::Unknown, _) => {
            return Err(format!(
                "ext4_run_li_request in this {version} tree is neither the fixed nor the unfixed form this harness knows; it cannot make the `{wanted}` variant"
            ))
        }
        (Detected::Fix, Variant::Fix) | (Detected::NoFix, Variant::NoFix) => {
            return Ok((Method::AsReleased, Vec::new()))
        }
        (Detected::Fix, Variant::NoFix) => Method::Reverted,
        (Detected::NoFix, Variant::Fix) => Method::AppliedForward,
    };
    let series = series_of(version);
    let mut patches: Vec<Patch> = PATCHES
        .iter()
        .copied()
        .filter(|p| p.method == method)
        .collect();
    patches.sort_by_key(|p| p.series != series);
    Ok((method, patches))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D61: &str = include_str!("../fixtures/run_li_request-debian-6.1.c");
    const D61_REV: &str = include_str!("../fixtures/run_li_request-debian-6.1-reverted.c");
    const D612: &str = include_str!("../fixtures/run_li_request-debian-6.12.c");
    const D612_REV: &str = include_str!("../fixtures/run_li_request-debian-6.12-reverted.c");
    const V54: &str = include_str!("../fixtures/run_li_request-5.4-before-fix.c");
    const D510: &str = include_str!("../fixtures/run_li_request-debian-5.10.c");
    const D72: &str = include_str!("../fixtures/run_li_request-debian-7.2.c");
    const D72_REV: &str = include_str!("../fixtures/run_li_request-debian-7.2-reverted.c");

    #[test]
    fn released_debian_trees_carry_the_fix() {
        assert_eq!(detect(D61), Detected::Fix);
        assert_eq!(detect(D612), Detected::Fix);
        assert_eq!(detect(D510), Detected::Fix);
    }

    #[test]
    fn debian_5_10_function_reads_as_6_1() {
        // Debian's 5.10.262 carries the 5.10.80 backport: the same text as
        // 6.1, so the 5.10 revert's hunks are 6.1's at 5.10's lines.
        assert_eq!(D510, D61);
        let hunks = |name: &str| -> Vec<String> {
            PATCHES
                .iter()
                .find(|p| p.name == name)
                .unwrap()
                .text
                .lines()
                .skip_while(|l| !l.starts_with("--- "))
                .filter(|l| !l.starts_with("@@"))
                .map(String::from)
                .collect()
        };
        assert_eq!(
            hunks("debian-5.10-revert-fix.patch"),
            hunks("debian-6.1-revert-fix.patch")
        );
    }

    #[test]
    fn reverted_and_pre_fix_trees_do_not() {
        assert_eq!(detect(D61_REV), Detected::NoFix);
        assert_eq!(detect(D612_REV), Detected::NoFix);
        assert_eq!(detect(D72_REV), Detected::NoFix);
        assert_eq!(detect(V54), Detected::NoFix);
    }

    /// Past v6.13 (e06a8c24f644) the first zeroing is timed with
    /// `ktime_get_ns()`: Debian's 7.2 reads as the fix, and its revert
    /// (the jiffies arithmetic on today's text) as the bug; the revert is
    /// 7.x's own, tried first for 7.2 and applied, by text, to 7.3.
    #[test]
    fn debian_7_2_carries_the_fix_with_the_monotonic_clock_and_reverts() {
        assert!(D72.contains("start_time = ktime_get_ns();") && !D72.contains("ktime_get_real_ns"));
        assert_eq!(detect(D72), Detected::Fix);
        let (m, p) = plan(Detected::Fix, Variant::NoFix, "7.2.13").unwrap();
        assert_eq!(
            (m, p[0].name),
            (Method::Reverted, "debian-7.2-revert-fix.patch")
        );
        let (_, p) = plan(Detected::Fix, Variant::NoFix, "7.3.4").unwrap();
        assert!(p.iter().any(|p| p.name == "debian-7.2-revert-fix.patch"));
        // The revert's hunks turn the released text into the reverted one.
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("fs/ext4")).unwrap();
        std::fs::write(
            d.path().join("fs/ext4/super.c"),
            format!("int a;\n\n/* Find next suitable group */\n{D72}\nint b;\n"),
        )
        .unwrap();
        let patch = PATCHES
            .iter()
            .find(|p| p.name == "debian-7.2-revert-fix.patch")
            .unwrap();
        let mut child = std::process::Command::new("patch")
            .args(["-p1", "-s", "--no-backup-if-mismatch"])
            .current_dir(d.path())
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(patch.text.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success());
        let after = std::fs::read_to_string(d.path().join("fs/ext4/super.c")).unwrap();
        assert_eq!(function_text(&after), Some(D72_REV));
        assert_eq!(detect_file(&after), Detected::NoFix);
    }

    #[test]
    fn later_ktime_get_ns_form_counts_as_fix() {
        let later = D612.replace("ktime_get_real_ns()", "ktime_get_ns()");
        assert_eq!(detect(&later), Detected::Fix);
    }

    #[test]
    fn a_half_patched_function_is_unknown() {
        // Both clocks present: a failed or partial patch must not pass.
        let both = D61.replace(
            "\t\tret = ext4_init_inode_table",
            "\t\ttimeout = jiffies;\n\t\tx = (jiffies - timeout);\n\t\tret = ext4_init_inode_table",
        );
        assert_eq!(detect(&both), Detected::Unknown);
        assert_eq!(
            detect("static int ext4_run_li_request(void)\n{\n}\n"),
            Detected::Unknown
        );
    }

    #[test]
    fn function_is_found_inside_a_file() {
        let file = format!(
            "int a;\n\n/* Find next suitable group */\n{D612}\nstatic void next(void)\n{{\n}}\n"
        );
        assert_eq!(function_text(&file), Some(D612));
        assert_eq!(detect_file(&file), Detected::Fix);
        assert_eq!(detect_file("int main(void) { }"), Detected::Unknown);
    }

    #[test]
    fn each_series_gets_its_own_patch_first() {
        let (m, p) = plan(Detected::Fix, Variant::NoFix, "6.12.117").unwrap();
        assert_eq!(m, Method::Reverted);
        assert_eq!(p[0].name, "debian-6.12-revert-fix.patch");
        assert!(p.iter().all(|p| p.method == Method::Reverted));
        let (_, p) = plan(Detected::Fix, Variant::NoFix, "6.1.192").unwrap();
        assert_eq!(p[0].name, "debian-6.1-revert-fix.patch");
        let (m, p) = plan(Detected::NoFix, Variant::Fix, "5.4.160").unwrap();
        assert_eq!(m, Method::AppliedForward);
        assert_eq!(p[0].name, "5.4-apply-fix.patch");
        let (m, p) = plan(Detected::Fix, Variant::NoFix, "5.10.262").unwrap();
        assert_eq!(m, Method::Reverted);
        assert_eq!(p[0].name, "debian-5.10-revert-fix.patch");
        let (m, p) = plan(Detected::NoFix, Variant::Fix, "5.10.79").unwrap();
        assert_eq!(m, Method::AppliedForward);
        assert_eq!(p[0].name, "5.10-apply-fix.patch");
        let (m, p) = plan(Detected::NoFix, Variant::NoFix, "5.10.79").unwrap();
        assert_eq!(m, Method::AsReleased);
        assert!(p.is_empty());
        assert!(plan(Detected::Unknown, Variant::Fix, "4.4.1").is_err());
    }

    #[test]
    fn patches_touch_only_ext4_run_li_request() {
        for p in PATCHES {
            let files: Vec<&str> = p.text.lines().filter(|l| l.starts_with("+++ ")).collect();
            assert_eq!(files, ["+++ b/fs/ext4/super.c"], "{}", p.name);
            assert!(p.text.lines().filter(|l| l.starts_with("@@")).all(
                |l| l.ends_with("static int ext4_run_li_request(struct ext4_li_request *elr)")
            ));
        }
    }
}
