-- The knob inode_size (crates/lazyinit-core/src/identity/knobs.rs):
-- mkfs.ext4's inode size in bytes. Rows imported before this migration,
-- and rows of files written before the column, read it as NULL, which
-- the store reads as the default, 256.
ALTER TABLE result_rows ADD COLUMN inode_size BIGINT;
