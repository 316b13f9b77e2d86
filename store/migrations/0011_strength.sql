-- Preference strength (issue 30; Llama 2's four levels, store/strengths.py): 0 negligibly better or unsure,
-- 1 slightly better, 2 better, 3 significantly better. An annotator says it for each step between adjacent groups
-- of their order; each pair gets the largest step between its two responses, kept here at write time. A ranking
-- made without strengths has no rows, and its pairs' strength is NULL.
CREATE TABLE pair_strengths (
    ranking_id BIGINT NOT NULL,
    chosen_id BIGINT NOT NULL,
    rejected_id BIGINT NOT NULL,
    strength INTEGER NOT NULL CHECK (strength BETWEEN 0 AND 3),
    PRIMARY KEY (ranking_id, chosen_id, rejected_id)
);

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
    j.model_id AS rejected_model,
    s.strength
FROM pair_ids x
JOIN rankings r ON r.ranking_id = x.ranking_id
JOIN prompts p ON p.prompt_id = r.prompt_id
JOIN responses c ON c.response_id = x.chosen_id
JOIN responses j ON j.response_id = x.rejected_id
LEFT JOIN response_rounds cr ON cr.response_id = x.chosen_id
LEFT JOIN pair_strengths s ON s.ranking_id = x.ranking_id AND s.chosen_id = x.chosen_id AND s.rejected_id = x.rejected_id
WHERE NOT r.skipped;
