//! Real builds through the public API. The first test compiles a real kernel
//! from Debian's linux-source-6.1 in both variants (on a machine that built
//! them before it is a cache hit; on a fresh one it takes minutes), the
//! others drive `build()` on small trees that must fail before compiling.

use lazyinit_core::exit::ExitCode;
use std::path::Path;

use lazyinit_kernel::{
    build, cached, list, Arch, BuildOptions, Hz, KernelError, KernelSource, KernelSpec, Method,
    Variant,
};

fn spec(variant: Variant) -> KernelSpec {
    KernelSpec::new(Arch::X86_64, Hz::new(250).unwrap(), variant)
}

#[tokio::test(flavor = "multi_thread")]
async fn debian_6_1_x86_64_both_variants_build_and_differ_only_as_asked() {
    let opts = BuildOptions::default();
    let nofix = build(&spec(Variant::NoFix), &opts)
        .await
        .expect("nofix build");
    let fix = build(&spec(Variant::Fix), &opts).await.expect("fix build");

    for (k, v, method) in [
        (&nofix, Variant::NoFix, Method::Reverted),
        (&fix, Variant::Fix, Method::AsReleased),
    ] {
        let m = &k.manifest;
        assert_eq!(m.id.variant, v);
        assert_eq!(m.variant_method, method);
        assert_eq!(
            m.kernel_release,
            format!("{}-lazyinit-hz250-{v}", m.source_version)
        );
        assert!(m.source_version.starts_with("6.1."), "{}", m.source_version);
        let image = std::fs::read(&k.image).unwrap();
        assert_eq!(image.len() as u64, m.image_bytes);
        assert_eq!(lazyinit_core::paths::sha256_hex(&image), m.image_sha256);
        let config = std::fs::read_to_string(k.dir().join("config")).unwrap();
        assert_eq!(lazyinit_core::paths::sha256_hex(&config), m.config_sha256);
        for line in [
            "CONFIG_HZ=250",
            "CONFIG_HZ_250=y",
            "CONFIG_EXT4_FS=y",
            "CONFIG_IKCONFIG_PROC=y",
        ] {
            assert!(config.lines().any(|l| l == line), "{line} missing");
        }
        assert!(config.contains(&format!("CONFIG_LOCALVERSION=\"{}\"", m.localversion)));
        // A second request is answered from the cache with the same files.
        assert_eq!(cached(&spec(v), &opts.cache_dir).as_ref(), Some(k));
    }
    assert_eq!(
        nofix.manifest.patch.as_deref(),
        Some("debian-6.1-revert-fix.patch")
    );
    assert_eq!(fix.manifest.patch, None);
    assert_ne!(nofix.manifest.image_sha256, fix.manifest.image_sha256);
    assert_ne!(nofix.manifest.cache_key, fix.manifest.cache_key);
    let listed = list(&opts.cache_dir);
    for k in [&nofix, &fix] {
        assert!(listed.iter().any(|m| m.cache_key == k.manifest.cache_key));
    }
}

fn fake_tree(dir: &Path, function: &str) {
    std::fs::create_dir_all(dir.join("fs/ext4")).unwrap();
    std::fs::write(
        dir.join("Makefile"),
        "VERSION = 5\nPATCHLEVEL = 4\nSUBLEVEL = 100\nEXTRAVERSION =\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("fs/ext4/super.c"),
        format!("/* test tree */\n{function}\n"),
    )
    .unwrap();
}

fn no_builds(cache: &Path) {
    let builds = cache.join("kernel/builds");
    let n = std::fs::read_dir(&builds).map(|d| d.count()).unwrap_or(0);
    assert_eq!(n, 0, "something was published under {}", builds.display());
    assert!(list(cache).is_empty());
}

#[tokio::test]
async fn an_unknown_function_form_is_refused_before_any_work() {
    let cache = tempfile::tempdir().unwrap();
    let tree = tempfile::tempdir().unwrap();
    fake_tree(
        tree.path(),
        "static int ext4_run_li_request(struct ext4_li_request *elr)\n{\n\treturn 0;\n}\n",
    );
    let mut s = spec(Variant::Fix);
    s.id.source = KernelSource::Path(tree.path().into());
    let opts = BuildOptions {
        cache_dir: cache.path().into(),
        ..BuildOptions::default()
    };
    let e = build(&s, &opts).await.unwrap_err();
    assert!(matches!(e, KernelError::Patch { .. }), "{e}");
    assert_eq!(e.exit_code(), lazyinit_core::exit::BAD_INPUT);
    no_builds(cache.path());
}

#[tokio::test]
async fn a_patch_that_does_not_apply_fails_clearly_and_caches_nothing() {
    // The 5.4 pre-fix form, but with its context edited so no patch applies.
    let text = include_str!("../fixtures/run_li_request-5.4-before-fix.c")
        .replace(
            "\tsb = elr->lr_super;\n",
            "\tsb = elr->lr_super; /* moved */\n",
        )
        .replace("\tif (!ret) {\n", "\tif (ret == 0) {\n");
    let cache = tempfile::tempdir().unwrap();
    let tree = tempfile::tempdir().unwrap();
    fake_tree(tree.path(), &text);
    let mut s = spec(Variant::Fix);
    s.id.source = KernelSource::Path(tree.path().into());
    let opts = BuildOptions {
        cache_dir: cache.path().into(),
        ..BuildOptions::default()
    };
    let e = build(&s, &opts).await.unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, KernelError::Patch { .. }), "{msg}");
    assert!(
        msg.contains("5.4-apply-fix.patch") && msg.contains("5.4.100"),
        "{msg}"
    );
    no_builds(cache.path());
    // The nofix variant of that tree is the tree as released and needs no patch;
    // it gets as far as configuring, which fails on a tree without Kconfig.
    s.id.variant = Variant::NoFix;
    let e = build(&s, &opts).await.unwrap_err();
    assert!(matches!(e, KernelError::Build { .. }), "{e}");
    no_builds(cache.path());
}
