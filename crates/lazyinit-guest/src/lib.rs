//! The guest protocol shared by every provider: verify, mkfs, mount, time ext4lazyinit
