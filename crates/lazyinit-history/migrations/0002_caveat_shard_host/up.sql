-- Three columns the results CSV appended after the first schema: what
-- widened an early-stop estimate's interval (estimate_caveat), and the
-- shard and host that measured a row (run --shard, merge). Rows imported
-- before this migration read them as NULL: absent, as in an older CSV.
ALTER TABLE result_rows ADD COLUMN estimate_caveat TEXT;
ALTER TABLE result_rows ADD COLUMN shard TEXT;
ALTER TABLE result_rows ADD COLUMN host TEXT;
