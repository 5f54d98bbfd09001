-- The results CSV appended `profile_held` (whether the kept first zeroing
-- was inside the storage profile's window after the last attempt) and
-- the window, `z1_lo_ms` and `z1_hi_ms`. Rows imported before this
-- migration read them as NULL: unknown, judged as before.
ALTER TABLE result_rows ADD COLUMN profile_held BOOLEAN;
ALTER TABLE result_rows ADD COLUMN z1_lo_ms DOUBLE PRECISION;
ALTER TABLE result_rows ADD COLUMN z1_hi_ms DOUBLE PRECISION;
