//! A user's tree and config through the public API, without compiling: a
//! git work tree is identified by its exact state and copied without its
//! build outputs, the user's tree is never written, and a config that cannot
//! be measured is refused by name before any work.

use lazyinit_core::exit::ExitCode;
use std::path::Path;

use lazyinit_kernel::source::{self, SourceKind};
use lazyinit_kernel::{
    build, list, Arch, BuildOptions, Hz, KernelError, KernelSource, KernelSpec, Variant,
};

use lazyinit_core::testing::sh;

/// A tree with what the harness reads (Makefile, fs/ext4/super.c) and the
/// outputs of an in-tree build that git ignores.
fn git_tree(dir: &Path) {
    std::fs::create_dir_all(dir.join("fs/ext4")).unwrap();
    std::fs::write(
        dir.join("Makefile"),
        "VERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL = 192\nEXTRAVERSION =\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("fs/ext4/super.c"),
        include_str!("../fixtures/run_li_request-debian-6.1.c"),
    )
    .unwrap();
    std::fs::write(dir.join(".gitignore"), "*.o\n.config\n/include/config/\n").unwrap();
    sh(
        dir,
        "git init -q -b main && git add -A && git commit -qm release",
    );
    // Built in place with some other config: none of this may travel.
    sh(
        dir,
        "echo CONFIG_HZ_1000=y > .config && mkdir -p include/config && touch include/config/auto.conf && echo obj > fs/ext4/super.o",
    );
}

fn mtime(p: &Path) -> std::time::SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

#[test]
fn a_git_tree_is_keyed_by_its_state_and_copied_without_build_outputs() {
    let cache = tempfile::tempdir().unwrap();
    let tree = tempfile::tempdir().unwrap();
    git_tree(tree.path());
    let src = KernelSource::Path(tree.path().into());
    let clean = source::resolve(&src, cache.path()).unwrap();
    assert!(matches!(clean.kind, SourceKind::GitTree(_)));
    assert_eq!(clean.facts.version, "6.1.192");
    assert!(
        clean.facts.identity.starts_with("git:"),
        "{}",
        clean.facts.identity
    );
    assert!(
        !clean.facts.identity.contains('+'),
        "the build outputs made it dirty"
    );

    // An uncommitted edit and an untracked file: a new identity each.
    sh(tree.path(), "echo '/* local change */' >> fs/ext4/super.c");
    let edited = source::resolve(&src, cache.path()).unwrap();
    assert!(edited
        .facts
        .identity
        .starts_with(&format!("{}+", clean.facts.identity)));
    sh(tree.path(), "echo 'obj-y += x.o' > fs/ext4/Kbuild.local");
    let untracked = source::resolve(&src, cache.path()).unwrap();
    assert_ne!(untracked.facts.identity, edited.facts.identity);

    // The copy has the tree's state and none of its build outputs; the
    // user's tree and its index are as they were.
    let index = mtime(&tree.path().join(".git/index"));
    let dest = cache.path().join("copy");
    source::unpack(&untracked.kind, &dest).unwrap();
    assert!(std::fs::read_to_string(dest.join("fs/ext4/super.c"))
        .unwrap()
        .ends_with("/* local change */\n"));
    assert!(dest.join("fs/ext4/Kbuild.local").is_file());
    for output in [
        ".config",
        "include/config/auto.conf",
        "fs/ext4/super.o",
        ".git",
    ] {
        assert!(!dest.join(output).exists(), "{output} was copied");
    }
    assert!(!source::was_built_in_place(&dest));
    assert_eq!(mtime(&tree.path().join(".git/index")), index);
    assert!(tree.path().join(".config").is_file());
    assert!(tree.path().join("fs/ext4/super.o").is_file());

    // Committing the changes: clean again, under the new commit.
    sh(tree.path(), "git add -A && git commit -qm local");
    let committed = source::resolve(&src, cache.path()).unwrap();
    assert!(!committed.facts.identity.contains('+'));
    assert_ne!(committed.facts.identity, clean.facts.identity);
}

#[test]
fn a_plain_tree_built_in_place_is_recognised_in_its_copy() {
    let tree = tempfile::tempdir().unwrap();
    git_tree(tree.path());
    std::fs::remove_dir_all(tree.path().join(".git")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let r = source::resolve(&KernelSource::Path(tree.path().into()), cache.path()).unwrap();
    assert!(matches!(r.kind, SourceKind::Tree(_)));
    let dest = cache.path().join("copy");
    source::unpack(&r.kind, &dest).unwrap();
    // The build cleans such a copy (make mrproper) before configuring.
    assert!(source::was_built_in_place(&dest));
}

fn opts(cache: &Path) -> BuildOptions {
    BuildOptions {
        cache_dir: cache.into(),
        ..BuildOptions::default()
    }
}

#[tokio::test]
async fn a_config_without_ext4_is_refused_by_name_before_any_work() {
    let cache = tempfile::tempdir().unwrap();
    let tree = tempfile::tempdir().unwrap();
    git_tree(tree.path());
    let config = tree.path().join("config-no-ext4");
    std::fs::write(
        &config,
        "CONFIG_HZ_1000=y\nCONFIG_HZ=1000\n# CONFIG_EXT4_FS is not set\nCONFIG_EXT2_FS=y\nCONFIG_CMDLINE_BOOL=y\nCONFIG_CMDLINE=\"console=ttyS0 clocksource=jiffies\"\n",
    )
    .unwrap();
    let mut spec = KernelSpec::new(Arch::X86_64, Hz::new(250).unwrap(), Variant::NoFix);
    spec.id.source = KernelSource::Path(tree.path().into());
    spec.config = Some(config.clone());
    let e = build(&spec, &opts(cache.path())).await.unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, KernelError::Unmeasurable { .. }), "{msg}");
    assert_eq!(e.exit_code(), lazyinit_core::exit::BAD_INPUT);
    assert!(msg.contains("CONFIG_EXT4_FS: not set"), "{msg}");
    assert!(
        msg.contains("CONFIG_CMDLINE: its `clocksource=jiffies`"),
        "{msg}"
    );
    assert!(msg.contains(&config.display().to_string()), "{msg}");
    // Nothing was unpacked, configured or published.
    assert!(!cache.path().join("kernel/work").exists());
    assert!(list(cache.path()).is_empty());
}

#[tokio::test]
async fn a_missing_or_empty_config_is_bad_input() {
    let cache = tempfile::tempdir().unwrap();
    let tree = tempfile::tempdir().unwrap();
    git_tree(tree.path());
    let mut spec = KernelSpec::new(Arch::Arm64, Hz::new(100).unwrap(), Variant::Fix);
    spec.id.source = KernelSource::Path(tree.path().into());
    spec.config = Some(tree.path().join("nope"));
    let e = build(&spec, &opts(cache.path())).await.unwrap_err();
    assert!(matches!(e, KernelError::BadInput(_)), "{e}");
    std::fs::write(tree.path().join("empty"), "# nothing\n").unwrap();
    spec.config = Some(tree.path().join("empty"));
    let e = build(&spec, &opts(cache.path())).await.unwrap_err();
    assert!(e.to_string().contains("not a kernel config"), "{e}");
}
