-- Training runs started from this store. The run folder holds the truth about progress (status.json,
-- metrics.jsonl); the store records which snapshot and config each run used, so any run can be relaunched.
CREATE TABLE runs (
    run_id VARCHAR PRIMARY KEY,             -- also the run folder's name
    kind VARCHAR NOT NULL,                  -- 'reward', 'ppo'
    path VARCHAR NOT NULL,
    snapshot_id BIGINT REFERENCES snapshots (snapshot_id),
    config JSON NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);
