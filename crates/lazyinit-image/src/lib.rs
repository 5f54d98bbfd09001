//! Guest images: per-arch initramfs from Debian packages, and the project's SSH keys
