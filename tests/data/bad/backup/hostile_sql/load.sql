COPY prompts FROM '../../../outside/prompts.parquet' (FORMAT 'parquet'); COPY (SELECT 1) TO 'pwned2.csv';
