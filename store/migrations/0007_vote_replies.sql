-- The old Compare votes' replies (0006), unless some ranking ranked them (an annotator was handed the vote's prompt).
DELETE FROM responses s WHERE s.n_tokens = 0 AND s.finish_reason = ''
    AND NOT EXISTS (SELECT 1 FROM ranking_items i WHERE i.response_id = s.response_id)
    AND NOT EXISTS (SELECT 1 FROM response_rounds x WHERE x.response_id = s.response_id);
