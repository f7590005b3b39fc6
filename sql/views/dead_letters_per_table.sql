-- dead_letters_per_table: rows and dead letters in the live files of each table,
-- per topic, with the dead-letter fraction (compare with quality.max_dead_letter_fraction).
CREATE OR REPLACE TEMPORARY VIEW dead_letters_per_table AS
SELECT `table`, topic,
       coalesce(sum(CASE WHEN kind = 'data' THEN rows END), 0) AS rows,
       coalesce(sum(CASE WHEN kind = 'dead_letter' THEN rows END), 0) AS dead_letters,
       round(coalesce(sum(CASE WHEN kind = 'dead_letter' THEN rows END), 0) / sum(rows), 6)
         AS dead_letter_fraction
FROM warehouse_files
GROUP BY `table`, topic
