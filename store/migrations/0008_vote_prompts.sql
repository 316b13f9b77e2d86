-- The prompts only old Compare votes made (0006, 0007): nothing else refers to them any more.
DELETE FROM prompts p WHERE p.source = 'compare'
    AND NOT EXISTS (SELECT 1 FROM responses s WHERE s.prompt_id = p.prompt_id)
    AND NOT EXISTS (SELECT 1 FROM rankings k WHERE k.prompt_id = p.prompt_id)
    AND NOT EXISTS (SELECT 1 FROM assignments a WHERE a.prompt_id = p.prompt_id)
    AND NOT EXISTS (SELECT 1 FROM round_prompts q WHERE q.prompt_id = p.prompt_id);
