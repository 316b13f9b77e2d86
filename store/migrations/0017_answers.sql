-- The answers of questions that keep no table of their own (annotation/questions/: a question whose `write` is the
-- generic one). One row per ranking and question, the answer as JSON as the question's reader returned it; the
-- pairs view carries every such answer of a pair's ranking as one JSON object (`answers`, NULL when none), so a
-- new question reaches the pairs without a migration. Undo deletes them with the ranking.
CREATE TABLE ranking_answers (
    ranking_id BIGINT NOT NULL,
    question VARCHAR NOT NULL,
    value JSON NOT NULL,
    PRIMARY KEY (ranking_id, question)
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
    s.strength,
    a.answers
FROM pair_ids x
JOIN rankings r ON r.ranking_id = x.ranking_id
JOIN prompts p ON p.prompt_id = r.prompt_id
JOIN responses c ON c.response_id = x.chosen_id
JOIN responses j ON j.response_id = x.rejected_id
LEFT JOIN response_rounds cr ON cr.response_id = x.chosen_id
LEFT JOIN pair_strengths s ON s.ranking_id = x.ranking_id AND s.chosen_id = x.chosen_id AND s.rejected_id = x.rejected_id
LEFT JOIN (SELECT ranking_id, json_group_object(question, value) AS answers FROM ranking_answers GROUP BY ranking_id) a
  ON a.ranking_id = x.ranking_id
WHERE NOT r.skipped;
