-- Gold prompts (issue 30): a ranking an admin trusts (their own, or an imported one) marked as the reference
-- answer of its prompt. The Annotate queue mixes gold prompts into each annotator's stream at a set rate, without
-- telling them apart; each annotator's rankings of a gold prompt are scored against its gold ranking (the
-- dashboard's gold accuracy), and snapshots can leave out the annotators under a threshold. One gold ranking a
-- prompt: marking another replaces it. Undoing a gold ranking unmarks its prompt (store/assignments.py).
CREATE TABLE gold (
    prompt_id BIGINT PRIMARY KEY,
    ranking_id BIGINT NOT NULL UNIQUE,
    marked_by VARCHAR NOT NULL,
    marked_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);
