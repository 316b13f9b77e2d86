-- rlhf-studio store, schema version 1. The only DDL besides the numbered files in store/migrations/.
-- One row per thing a person or a model produced; rankings expand to pairs in the `pairs` view.

CREATE SEQUENCE IF NOT EXISTS prompt_ids START 1;
CREATE SEQUENCE IF NOT EXISTS response_ids START 1;
CREATE SEQUENCE IF NOT EXISTS ranking_ids START 1;
CREATE SEQUENCE IF NOT EXISTS import_ids START 1;
CREATE SEQUENCE IF NOT EXISTS snapshot_ids START 1;

CREATE TABLE schema_version (
    version INTEGER PRIMARY KEY,
    applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);

-- Re-adding the same prompt text reuses its row (UNIQUE text).
CREATE TABLE prompts (
    prompt_id BIGINT PRIMARY KEY DEFAULT nextval('prompt_ids'),
    text VARCHAR NOT NULL UNIQUE,
    source VARCHAR NOT NULL,                -- file name, 'example', 'import:native', 'import:labelstudio', ...
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);

-- A response is sampled once and shown to many annotators; `position` is its default presentation order
-- (sample index, or the order in an imported file). Per-annotator shown order lives in ranking_items.
CREATE TABLE responses (
    response_id BIGINT PRIMARY KEY DEFAULT nextval('response_ids'),
    prompt_id BIGINT NOT NULL REFERENCES prompts (prompt_id),
    text VARCHAR NOT NULL,
    model_id VARCHAR NOT NULL,              -- 'default:SmolLM2-135M-Instruct', a model path, or 'import:<source>'
    params JSON,                            -- sampling parameters of the generate call
    seed BIGINT,                            -- torch seed of the generate call
    position INTEGER NOT NULL,
    n_tokens INTEGER,
    finish_reason VARCHAR,                  -- 'eos' or 'length' for sampled responses
    duplicate_of BIGINT,                    -- an identical earlier sample of the same prompt
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);

-- One import batch (a file, or a live pull): what it added, for the summary line and for auditing.
CREATE TABLE imports (
    import_id BIGINT PRIMARY KEY DEFAULT nextval('import_ids'),
    source VARCHAR NOT NULL,                -- 'native', 'labelstudio'
    origin VARCHAR NOT NULL,                -- file path or URL#project
    content_sha256 VARCHAR,
    summary JSON NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);

-- A ranking is one annotator's judgement of one prompt's responses. external_key makes imports idempotent
-- ('ls:<origin>:<task id>:<annotation id>', origin naming the server and project where known: annotation/labelstudio.py;
-- 'native:<content hash>').
CREATE TABLE rankings (
    ranking_id BIGINT PRIMARY KEY DEFAULT nextval('ranking_ids'),
    prompt_id BIGINT NOT NULL REFERENCES prompts (prompt_id),
    annotator VARCHAR NOT NULL,
    source VARCHAR NOT NULL,                -- 'native', 'labelstudio', 'ui', 'compare'
    external_key VARCHAR UNIQUE,
    import_id BIGINT REFERENCES imports (import_id),
    lead_time_s DOUBLE,
    skipped BOOLEAN NOT NULL DEFAULT false,
    skip_reason VARCHAR,
    flags VARCHAR[] NOT NULL DEFAULT [],    -- 'shown_order' (ranked exactly as shown), 'fast' (tiny lead time)
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);

-- rank 1 = best; equal ranks are a tie. shown_position = where this annotator saw the response (0-based).
-- ranking_id has no REFERENCES: DuckDB cannot delete a referenced row in the same transaction that deletes the
-- rows referring to it, and undoing a ranking must be one transaction. store/rankings.py keeps the link.
CREATE TABLE ranking_items (
    ranking_id BIGINT NOT NULL,
    response_id BIGINT NOT NULL REFERENCES responses (response_id),
    rank INTEGER NOT NULL CHECK (rank >= 1),
    shown_position INTEGER,
    PRIMARY KEY (ranking_id, response_id)
);

-- Immutable training inputs written by `rlhf train-*` / store.snapshot.write_snapshot.
CREATE TABLE snapshots (
    snapshot_id BIGINT PRIMARY KEY DEFAULT nextval('snapshot_ids'),
    path VARCHAR NOT NULL,
    content_sha256 VARCHAR NOT NULL,
    manifest JSON NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);

-- Every i, j of one ranking with rank_i < rank_j is a pair: chosen = i, rejected = j, margin = the rank gap.
-- K responses without ties give C(K, 2) pairs; tied responses give none. Skipped rankings give none.
CREATE VIEW pair_ids AS
SELECT a.ranking_id, a.response_id AS chosen_id, b.response_id AS rejected_id, b.rank - a.rank AS margin
FROM ranking_items a
JOIN ranking_items b ON a.ranking_id = b.ranking_id AND a.rank < b.rank;

CREATE VIEW pairs AS
SELECT
    r.prompt_id,
    p.text AS prompt,
    c.text AS chosen,
    j.text AS rejected,
    x.margin,
    r.annotator,
    r.source,
    x.ranking_id,
    x.chosen_id,
    x.rejected_id,
    len(r.flags) > 0 AS flagged
FROM pair_ids x
JOIN rankings r ON r.ranking_id = x.ranking_id
JOIN prompts p ON p.prompt_id = r.prompt_id
JOIN responses c ON c.response_id = x.chosen_id
JOIN responses j ON j.response_id = x.rejected_id
WHERE NOT r.skipped;
