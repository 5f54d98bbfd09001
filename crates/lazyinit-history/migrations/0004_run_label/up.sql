-- `history import --label L`: a name a person gives a run (a release,
-- `6.1.160`), for `history check --baseline label:L`. NULL: none given.
ALTER TABLE runs ADD COLUMN label TEXT;
