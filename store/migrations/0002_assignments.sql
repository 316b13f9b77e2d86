-- Browser annotation: which annotator holds which prompt, and in what order its responses were shown.
-- A prompt is handed to at most `overlap` annotators at once (counting finished rankings and open assignments),
-- so two annotators do not rank the same prompt at the same time unless agreement is wanted.
CREATE SEQUENCE IF NOT EXISTS assignment_ids START 1;

CREATE TABLE assignments (
    assignment_id BIGINT PRIMARY KEY DEFAULT nextval('assignment_ids'),
    prompt_id BIGINT NOT NULL REFERENCES prompts (prompt_id),
    annotator VARCHAR NOT NULL,
    shown_order BIGINT[] NOT NULL,          -- response ids in the order this annotator sees them
    status VARCHAR NOT NULL DEFAULT 'open', -- 'open', 'done' (ranked or skipped)
    ranking_id BIGINT,                      -- the ranking or skip that closed it
    assigned_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
    closed_at TIMESTAMP
);
