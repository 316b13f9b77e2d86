-- Guidelines and tags (issue 30). A guideline is the Markdown an admin sets for the campaign, kept in versions
-- (a new text is a new version; nothing is overwritten); each ranking records the version that was shown with its
-- task (NULL: none was set, or the ranking was imported). A tag is an annotator's mark on one response of their
-- ranking (store/guidelines.py's TAGS: unsafe, factually wrong, off topic, other), one row per tag; a ranking
-- without tags has no rows. Neither changes the pairs: they are for the lead (the dashboard) and for filters.
CREATE TABLE guidelines (
    version INTEGER PRIMARY KEY,
    text VARCHAR NOT NULL,
    author VARCHAR NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);

ALTER TABLE rankings ADD COLUMN guideline_version INTEGER;

CREATE TABLE response_tags (
    ranking_id BIGINT NOT NULL,
    response_id BIGINT NOT NULL,
    tag VARCHAR NOT NULL CHECK (tag IN ('unsafe', 'factually wrong', 'off topic', 'other')),
    PRIMARY KEY (ranking_id, response_id, tag)
);
