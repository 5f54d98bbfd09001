-- The results CSV appended `kernel_tree` (tree-<12 hex>: the identity of
-- the git tree a kernel was built from). Rows imported before this
-- migration read it as NULL: named by their path's hash, as before.
ALTER TABLE result_rows ADD COLUMN kernel_tree TEXT;
