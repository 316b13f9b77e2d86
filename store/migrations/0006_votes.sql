-- Compare votes are preferences about chats, kept apart from the annotation data: a vote never adds a prompt to the
-- annotators' queue, never adds responses to a stored prompt of the same text, and reaches training only when a run
-- asks for it (`--with-votes`, through the vote_pairs view). Before this, a vote was a ranking of source 'compare'
-- on a prompt made from the chat's last message; those move here below.
CREATE SEQUENCE IF NOT EXISTS vote_ids START 1;

CREATE TABLE votes (
    vote_id BIGINT PRIMARY KEY DEFAULT nextval('vote_ids'),
    annotator VARCHAR NOT NULL,
    prompt VARCHAR NOT NULL,                -- the message both sides answered
    context JSON NOT NULL,                  -- [left messages, right messages] before the replies ([] for a first turn)
    left_text VARCHAR NOT NULL,
    left_model VARCHAR NOT NULL,
    right_text VARCHAR NOT NULL,
    right_model VARCHAR NOT NULL,
    choice VARCHAR NOT NULL CHECK (choice IN ('left', 'right', 'tie', 'both_bad')),
    params JSON,                            -- the sampling parameters both sides used
    seed BIGINT,
    flags VARCHAR[] NOT NULL DEFAULT [],    -- 'blind', 'multi_turn'
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);

-- A decided vote as a pair, in the columns of the `pairs` view (no prompt, ranking or response ids: votes have none).
CREATE VIEW vote_pairs AS
SELECT
    NULL::BIGINT AS prompt_id,
    v.prompt,
    CASE v.choice WHEN 'left' THEN v.left_text ELSE v.right_text END AS chosen,
    CASE v.choice WHEN 'left' THEN v.right_text ELSE v.left_text END AS rejected,
    1 AS margin,
    v.annotator,
    'compare' AS source,
    NULL::BIGINT AS ranking_id,
    NULL::BIGINT AS chosen_id,
    NULL::BIGINT AS rejected_id,
    len(v.flags) > 0 AS flagged,
    NULL::INTEGER AS round,
    CASE v.choice WHEN 'left' THEN v.left_model ELSE v.right_model END AS chosen_model,
    CASE v.choice WHEN 'left' THEN v.right_model ELSE v.left_model END AS rejected_model
FROM votes v
WHERE v.choice IN ('left', 'right') AND v.left_text <> v.right_text;

-- The old votes: each 'compare' ranking had its two replies as responses (shown positions 0 and 1).
INSERT INTO votes (annotator, prompt, context, left_text, left_model, right_text, right_model, choice, params, seed,
                   flags, created_at)
SELECT r.annotator, p.text, '[]', l.text, l.model_id, rt.text, rt.model_id,
       CASE WHEN r.skipped AND r.skip_reason = 'both bad' THEN 'both_bad'
            WHEN li.rank = ri.rank OR r.skipped THEN 'tie'
            WHEN li.rank < ri.rank THEN 'left' ELSE 'right' END,
       l.params, l.seed, r.flags, r.created_at
FROM rankings r
JOIN prompts p USING (prompt_id)
JOIN ranking_items li ON li.ranking_id = r.ranking_id AND li.shown_position = 0
JOIN ranking_items ri ON ri.ranking_id = r.ranking_id AND ri.shown_position = 1
JOIN responses l ON l.response_id = li.response_id
JOIN responses rt ON rt.response_id = ri.response_id
WHERE r.source = 'compare'
ORDER BY r.ranking_id;

-- The old votes' rankings go; their replies (stored with n_tokens 0 and finish_reason '', which no sampler or import
-- writes) leave the responses in 0007 unless another ranking ranked them, and the prompts only votes made in 0008:
-- DuckDB cannot delete a row in the transaction that deleted the rows referring to it, and each migration is one.
-- Open tasks showing such a reply are handed back to the pool now.
DELETE FROM assignments WHERE status = 'open' AND list_has_any(shown_order, (
    SELECT coalesce(list(i.response_id), []) FROM ranking_items i JOIN rankings r USING (ranking_id)
    WHERE r.source = 'compare'));
DELETE FROM ranking_items WHERE ranking_id IN (SELECT ranking_id FROM rankings WHERE source = 'compare');
DELETE FROM rankings WHERE source = 'compare';
