-- A reward model's score of each ranked response (issue 30: the dashboard's agreement with the current reward
-- model). Written by `rlhf rm-agreement` (app/jobs/rm_agreement.py) in chunks, so a stopped scoring goes on where it
-- stopped; read per annotator against their pairs (store/rm_scores.py). Each response is scored once per run, not
-- once per pair: a ranking of K responses gives C(K, 2) pairs from K scores.
CREATE TABLE response_scores (
    run_id VARCHAR NOT NULL,
    response_id BIGINT NOT NULL,
    score DOUBLE NOT NULL,
    PRIMARY KEY (run_id, response_id)
);
