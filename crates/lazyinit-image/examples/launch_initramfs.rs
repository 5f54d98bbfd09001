//! Prints the path of a launch initramfs (cached image + the project's keys)
//! for manual QEMU runs: `cargo run -p lazyinit-image --example
//! launch_initramfs -- arm64 /tmp/launch`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let arch: lazyinit_core::Arch = args.next().unwrap_or_else(|| "x86_64".into()).parse()?;
    let dir =
        std::path::PathBuf::from(args.next().unwrap_or_else(|| "/tmp/lazyinit-launch".into()));
    let keys = lazyinit_ssh::Keys::load_or_create(&lazyinit_core::paths::state_dir())?;
    let image = lazyinit_image::build_blocking(arch, &lazyinit_image::ImageOptions::default())?;
    println!(
        "{}",
        lazyinit_image::initramfs_for_launch(&image, &keys, &dir)?.display()
    );
    Ok(())
}
