-- "All bad" (issue 30's outcome kind, annotation/questions/all_bad.py): the annotator found none of the shown
-- responses good. Without an edit the answer ranks nothing: it is kept as a skip is (skipped, no items, no pairs)
-- and counted apart on the dashboard. With an edit, the edit is ranked over the shown responses, which tie below
-- it: K pairs, none among the shown. Undo keeps the mark in its trace.
ALTER TABLE rankings ADD COLUMN all_bad BOOLEAN DEFAULT false;
ALTER TABLE undone_rankings ADD COLUMN all_bad BOOLEAN DEFAULT false;
-- Before, the Annotate tab offered "all responses are bad" among the skip reasons: those skips were this answer.
UPDATE rankings SET all_bad = true WHERE skipped AND skip_reason = 'all responses are bad';
UPDATE undone_rankings SET all_bad = true WHERE skipped AND skip_reason = 'all responses are bad';
