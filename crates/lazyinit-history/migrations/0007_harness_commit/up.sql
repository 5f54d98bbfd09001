-- The results CSV appended `harness_commit`: the harness's git commit
-- that measured the row (`-dirty` when a tracked file differed from it,
-- `unknown` for a build outside git). Rows imported before this migration,
-- and rows of files written before the column, read it as NULL.
ALTER TABLE result_rows ADD COLUMN harness_commit TEXT;
