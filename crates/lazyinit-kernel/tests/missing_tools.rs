//! A host without the build tools gets one error naming them and the apt
//! command, before any work. Its own test binary: it empties PATH.

use lazyinit_core::exit::ExitCode;
use lazyinit_kernel::{build, Arch, BuildOptions, Hz, KernelError, KernelSpec, Variant};

#[tokio::test]
async fn missing_tools_are_named_with_the_install_command() {
    let empty = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::env::set_var("PATH", empty.path());
    // The foreign arch, so the cross-compiler's package is named too.
    let arch = if Arch::host() == Some(Arch::Arm64) {
        Arch::X86_64
    } else {
        Arch::Arm64
    };
    let spec = KernelSpec::new(arch, Hz::new(100).unwrap(), Variant::Fix);
    let opts = BuildOptions {
        cache_dir: cache.path().into(),
        ..BuildOptions::default()
    };
    let e = build(&spec, &opts).await.unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, KernelError::MissingTool { .. }), "{msg}");
    assert_eq!(e.exit_code(), lazyinit_core::exit::MISSING_TOOL);
    assert!(
        msg.contains("make") && msg.contains("flex") && msg.contains("bison"),
        "{msg}"
    );
    assert!(
        msg.contains("apt-get install") && msg.contains(&format!("gcc-{}", arch.gnu_triplet())),
        "{msg}"
    );
    assert!(
        std::fs::read_dir(cache.path()).unwrap().next().is_none(),
        "work was done"
    );
}
