//! Kernel builds: fragments, variant patches, verification and the content-keyed cache
