-- The Annotate tab's Undo takes back an annotator's last answer and hands its task back; what it took back stays
-- here (`rlhf undone`): who, when, and the ranking or skip as it was. Only the last answer can be undone, so no run
-- of clicks erases a history, and nothing an annotator undoes is lost without a trace.
CREATE SEQUENCE IF NOT EXISTS undo_ids START 1;

CREATE TABLE undone_rankings (
    undo_id BIGINT PRIMARY KEY DEFAULT nextval('undo_ids'),
    ranking_id BIGINT NOT NULL,             -- the id the ranking had (it is gone from rankings)
    assignment_id BIGINT NOT NULL,          -- the task handed back
    prompt_id BIGINT NOT NULL,
    annotator VARCHAR NOT NULL,
    skipped BOOLEAN NOT NULL,
    skip_reason VARCHAR,
    response_ids BIGINT[] NOT NULL,         -- in the order the annotator saw them
    ranks INTEGER[] NOT NULL,               -- ranks[i] of response_ids[i]; empty for a skip
    ranked_at TIMESTAMP NOT NULL,
    undone_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);
