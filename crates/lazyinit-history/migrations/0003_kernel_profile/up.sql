-- The results CSV appended `kernel_profile` (qemu or cloud: the kernel
-- configuration the row's kernel was built with). Rows imported before
-- this migration read it as NULL: unknown, as in an older CSV.
ALTER TABLE result_rows ADD COLUMN kernel_profile TEXT;
