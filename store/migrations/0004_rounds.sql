-- Rounds (`rlhf round start`): round N samples the prompts chosen for it from one policy (the SFT model, a PPO
-- run's actor or one of its checkpoints), optionally mixing in the previous policy's samples, and its rankings train
-- the next reward model and PPO run. Every response stored before rounds existed belongs to round 1: a response
-- has a row in response_rounds only when a round sampled it, and no row reads as round 1 (nothing is rewritten).
CREATE TABLE rounds (
    round INTEGER PRIMARY KEY CHECK (round >= 1),
    policy VARCHAR NOT NULL,                -- the model the round sampled from: 'default', a folder
    previous_policy VARCHAR,                -- its samples mixed into each ranking (--mix-previous), else NULL
    selection VARCHAR NOT NULL,             -- how its prompts were chosen: 'random', 'uncertain', 'disagree', 'all'
    params JSON NOT NULL,                   -- k, mix_previous, n, seed, the reward model that scored, ...
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);

-- The prompts a round asks, in the order the Annotate queue hands them out; `value` is what the selection ranked
-- them by (mean score gap for 'uncertain', the ensemble's order disagreement for 'disagree'; NULL otherwise).
CREATE TABLE round_prompts (
    round INTEGER NOT NULL,
    prompt_id BIGINT NOT NULL REFERENCES prompts (prompt_id),
    position INTEGER NOT NULL,
    value DOUBLE,
    PRIMARY KEY (round, prompt_id)
);

CREATE TABLE response_rounds (
    response_id BIGINT PRIMARY KEY REFERENCES responses (response_id),
    round INTEGER NOT NULL
);

-- Every response with its round (1 for those no round sampled).
CREATE VIEW response_round AS
SELECT r.response_id, r.prompt_id, r.model_id, coalesce(x.round, 1) AS round
FROM responses r LEFT JOIN response_rounds x USING (response_id);

-- A ranking's round is its responses' round (a ranking only ever shows one round's responses).
CREATE VIEW ranking_round AS
SELECT i.ranking_id, max(rr.round) AS round
FROM ranking_items i JOIN response_round rr USING (response_id)
GROUP BY i.ranking_id;

-- The pairs view, with each pair's round and the policies (model ids) of its chosen and rejected responses.
CREATE OR REPLACE VIEW pairs AS
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
    len(r.flags) > 0 AS flagged,
    coalesce(cr.round, 1) AS round,
    c.model_id AS chosen_model,
    j.model_id AS rejected_model
FROM pair_ids x
JOIN rankings r ON r.ranking_id = x.ranking_id
JOIN prompts p ON p.prompt_id = r.prompt_id
JOIN responses c ON c.response_id = x.chosen_id
JOIN responses j ON j.response_id = x.rejected_id
LEFT JOIN response_rounds cr ON cr.response_id = x.chosen_id
WHERE NOT r.skipped;
