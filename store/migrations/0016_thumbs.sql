-- Thumbs (TRL's unpaired preference type, training/data_types.py): a judgement on one response alone, which pairs
-- cannot carry. Two kinds are stored today: a Compare vote "both bad" (both replies down) and an "all bad" answer
-- without an edit in the Annotate tab (each response that task showed, down: the assignment keeps their ids). A
-- trainer on unpaired data (KTO) reads them beside the pairs, which it reads as thumbs by net wins.
CREATE VIEW thumbs AS
SELECT CAST(NULL AS BIGINT) AS prompt_id, v.prompt, v.left_text AS completion, false AS label, v.annotator,
       'compare' AS source, CAST(NULL AS BIGINT) AS response_id, len(v.flags) > 0 AS flagged
FROM votes v WHERE v.choice = 'both_bad'
UNION ALL
SELECT NULL, v.prompt, v.right_text, false, v.annotator, 'compare', NULL, len(v.flags) > 0
FROM votes v WHERE v.choice = 'both_bad' AND v.right_text != v.left_text
UNION ALL
SELECT k.prompt_id, p.text, r.text, false, k.annotator, k.source, r.response_id, len(k.flags) > 0
FROM rankings k
JOIN prompts p ON p.prompt_id = k.prompt_id
JOIN (SELECT ranking_id, unnest(shown_order) AS response_id FROM assignments WHERE ranking_id IS NOT NULL) s
  ON s.ranking_id = k.ranking_id
JOIN responses r ON r.response_id = s.response_id
WHERE k.all_bad AND k.skipped;
