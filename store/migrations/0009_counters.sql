-- Counters kept at write time, so that no per-submit query scans every response or ranking (issue 30): each
-- assignment names the round of the task it was for; `tasks` holds each prompt's current task (its latest round)
-- with how many responses can be ranked, how many annotators were handed it and how many answered; and
-- `ranking_counts` holds rankings, skips and pairs per annotator and source. store/tasks.py keeps them; the views
-- `task_state` and `ranking_count_state` compute the same from the base tables (the backfill here, and the tests
-- that check the counters never drift).
ALTER TABLE assignments ADD COLUMN round INTEGER;
UPDATE assignments a SET round = x.round FROM response_round x WHERE x.response_id = a.shown_order[1];
UPDATE assignments SET round = 1 WHERE round IS NULL;

CREATE VIEW task_state AS
WITH cur AS (SELECT prompt_id, max(round) AS round FROM response_round GROUP BY prompt_id),
     rankable AS (SELECT x.prompt_id, x.round, count(*) AS n
                  FROM response_round x JOIN responses r USING (response_id)
                  WHERE r.duplicate_of IS NULL AND ltrim(r.text) <> '' GROUP BY x.prompt_id, x.round),
     held AS (SELECT prompt_id, round, count(*) AS assigned, count(ranking_id) AS done
              FROM assignments GROUP BY prompt_id, round)
SELECT cur.prompt_id, cur.round, coalesce(k.n, 0)::INTEGER AS rankable, q.position,
       coalesce(h.assigned, 0)::INTEGER AS assigned, coalesce(h.done, 0)::INTEGER AS done
FROM cur LEFT JOIN rankable k USING (prompt_id, round) LEFT JOIN round_prompts q USING (prompt_id, round)
LEFT JOIN held h USING (prompt_id, round);

CREATE TABLE tasks (
    prompt_id BIGINT PRIMARY KEY,
    round INTEGER NOT NULL,     -- the prompt's latest round: the task the queue hands out
    rankable INTEGER NOT NULL,  -- that round's responses an annotator can rank (not duplicates, not blank)
    position INTEGER,           -- its place in the round's asking order (round_prompts), NULL if none
    assigned INTEGER NOT NULL,  -- assignments for that round, open or done
    done INTEGER NOT NULL       -- of those, answered (ranked or skipped)
);
INSERT INTO tasks SELECT * FROM task_state;

CREATE VIEW ranking_count_state AS
SELECT r.annotator, r.source, (count(*) FILTER (WHERE NOT r.skipped))::BIGINT AS rankings,
       (count(*) FILTER (WHERE r.skipped))::BIGINT AS skipped,
       coalesce(sum(p.n) FILTER (WHERE NOT r.skipped), 0)::BIGINT AS pairs
FROM rankings r LEFT JOIN (SELECT ranking_id, count(*) AS n FROM pair_ids GROUP BY ranking_id) p USING (ranking_id)
GROUP BY r.annotator, r.source;

CREATE TABLE ranking_counts (
    annotator VARCHAR NOT NULL,
    source VARCHAR NOT NULL,
    rankings BIGINT NOT NULL,   -- not skipped
    skipped BIGINT NOT NULL,
    pairs BIGINT NOT NULL,      -- the pairs its rankings expand to (the `pairs` view's rows)
    PRIMARY KEY (annotator, source)
);
INSERT INTO ranking_counts SELECT * FROM ranking_count_state;
