-- The history's first schema. One text for SQLite and PostgreSQL: only
-- types both read the same way (TEXT, BIGINT, DOUBLE PRECISION, BOOLEAN)
-- and natural keys, so no dialect's auto-increment is needed.

-- One run folder: what ran it and on what. NULL where the folder does not
-- say (older runs kept fewer files): never a guess.
CREATE TABLE runs (
    run_key TEXT PRIMARY KEY,          -- run_id '@' started_at of its first row
    run_id TEXT NOT NULL,
    folder TEXT NOT NULL,              -- as given to import
    first_started_at TEXT NOT NULL,
    imported_at TEXT NOT NULL,
    spec_toml TEXT,
    command_txt TEXT,
    host_cpu TEXT,
    host_cores BIGINT,
    host_memory_bytes BIGINT,
    qemu_version TEXT
);

-- One result row: every column of results.csv, then the cell's provenance.
CREATE TABLE result_rows (
    run_key TEXT NOT NULL REFERENCES runs (run_key),
    run_id TEXT NOT NULL,
    cell_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    machine TEXT NOT NULL,
    accel TEXT NOT NULL,
    arch TEXT NOT NULL,
    kernel_release TEXT NOT NULL,
    kernel_source TEXT NOT NULL,
    hz BIGINT NOT NULL,
    variant TEXT NOT NULL,
    wait_mult BIGINT NOT NULL,
    volume_bytes BIGINT NOT NULL,
    "groups" BIGINT,                   -- quoted: a keyword of both dialects
    mkfs_s DOUBLE PRECISION,
    mount_s DOUBLE PRECISION,
    lazyinit_s DOUBLE PRECISION,
    lazyinit_poll_s DOUBLE PRECISION,
    ms_per_group DOUBLE PRECISION,
    traced_groups BIGINT,
    repetition BIGINT NOT NULL,
    started_at TEXT NOT NULL,
    harness_version TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT NOT NULL,
    clocksource TEXT NOT NULL,
    sleep_ticks BIGINT,
    boot_s DOUBLE PRECISION,
    first_group_s DOUBLE PRECISION,
    storage_profile TEXT NOT NULL,
    concurrency BIGINT NOT NULL,
    mkfs_cmd TEXT NOT NULL,
    z1_ms DOUBLE PRECISION,
    z1_target_ms DOUBLE PRECISION,
    guest_part_ms DOUBLE PRECISION,
    zero_hold_ms DOUBLE PRECISION,
    zero_median_ms DOUBLE PRECISION,
    z1_attempts BIGINT,
    estimated BOOLEAN NOT NULL,
    estimate_after BIGINT,
    estimate_groups BIGINT,
    estimate_cycle_ms DOUBLE PRECISION,
    lazyinit_lo_s DOUBLE PRECISION,
    lazyinit_hi_s DOUBLE PRECISION,
    crossed_ticks DOUBLE PRECISION,
    -- Provenance of the cell (its folder and the kernel cache's manifest).
    kernel_build TEXT,                 -- the cache directory of the image booted
    kernel_source_identity TEXT,       -- sha256:<tarball> or tree:<hash of tree and diff>
    kernel_source_version TEXT,
    kernel_config_sha256 TEXT,
    kernel_patch_sha256 TEXT,
    guest_facts TEXT,                  -- facts.txt as the guest wrote it
    storage_calibration TEXT,          -- storage.txt
    qemu_cmdline TEXT,
    PRIMARY KEY (run_key, cell_id, started_at)
);

CREATE INDEX result_rows_series ON result_rows (arch, hz, variant, volume_bytes);

-- A change found in a series, and what a person said about it.
CREATE TABLE alerts (
    alert_id TEXT PRIMARY KEY,         -- 8 hex: series, metric, first run after
    series TEXT NOT NULL,              -- the series' label
    metric TEXT NOT NULL,
    run_key TEXT NOT NULL,             -- the first run after the change
    kind TEXT NOT NULL,                -- change | new-run
    state TEXT NOT NULL,               -- new | acknowledged | invalid
    note TEXT,
    detail TEXT NOT NULL,              -- the change as JSON
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
