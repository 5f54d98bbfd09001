//! The local QEMU provider
