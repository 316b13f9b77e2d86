-- Thumbs up as well as down (annotation/questions/best_good.py): "is the response you ranked best good as it is?"
-- answered yes is a thumbs up on each response the ranking put first (an edit, ranked above them, aside), no a
-- thumbs down. The answer is a ranking_answers row (migration 0017); the view adds it to the thumbs of 0016.
CREATE OR REPLACE VIEW thumbs AS
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
WHERE k.all_bad AND k.skipped
UNION ALL
SELECT k.prompt_id, p.text, r.text, CAST(a.value AS BOOLEAN), k.annotator, k.source, r.response_id, len(k.flags) > 0
FROM ranking_answers a
JOIN rankings k ON k.ranking_id = a.ranking_id
JOIN prompts p ON p.prompt_id = k.prompt_id
JOIN (SELECT i.ranking_id, i.response_id, i.rank, min(i.rank) OVER (PARTITION BY i.ranking_id) AS best
      FROM ranking_items i WHERE NOT EXISTS (SELECT 1 FROM edits e WHERE e.response_id = i.response_id)) b
  ON b.ranking_id = k.ranking_id AND b.rank = b.best
JOIN responses r ON r.response_id = b.response_id
WHERE a.question = 'best_good' AND NOT k.skipped;
