-- Edits (issue 30; Llama 3's edited > chosen > rejected): an annotator may correct the response they ranked best.
-- The correction is a response of its own (model_id 'edit'), ranked first in that annotator's ranking, so the
-- pairs view gives it above every response of the ranking and no new pair rule is needed. It is never handed out
-- as a task's response: the queue's rankable responses, and so the `tasks` counters, leave edits out.
CREATE TABLE edits (
    response_id BIGINT PRIMARY KEY REFERENCES responses (response_id),
    edit_of BIGINT NOT NULL REFERENCES responses (response_id),  -- the response the annotator ranked best
    annotator VARCHAR NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);

CREATE OR REPLACE VIEW task_state AS
WITH cur AS (SELECT prompt_id, max(round) AS round FROM response_round GROUP BY prompt_id),
     rankable AS (SELECT x.prompt_id, x.round, count(*) AS n
                  FROM response_round x JOIN responses r USING (response_id)
                  WHERE r.duplicate_of IS NULL AND ltrim(r.text) <> ''
                    AND NOT EXISTS (SELECT 1 FROM edits e WHERE e.response_id = r.response_id)
                  GROUP BY x.prompt_id, x.round),
     held AS (SELECT prompt_id, round, count(*) AS assigned, count(ranking_id) AS done
              FROM assignments GROUP BY prompt_id, round)
SELECT cur.prompt_id, cur.round, coalesce(k.n, 0)::INTEGER AS rankable, q.position,
       coalesce(h.assigned, 0)::INTEGER AS assigned, coalesce(h.done, 0)::INTEGER AS done
FROM cur LEFT JOIN rankable k USING (prompt_id, round) LEFT JOIN round_prompts q USING (prompt_id, round)
LEFT JOIN held h USING (prompt_id, round);
