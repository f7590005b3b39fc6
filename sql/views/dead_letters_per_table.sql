-- dead_letters_per_table: rows of each table and of its <table>_dead_letters table
-- (records in the data files of the snapshot read), with the dead-letter fraction
-- (compare with quality.max_dead_letter_fraction).
CREATE OR REPLACE TEMPORARY VIEW dead_letters_per_table AS
WITH per_table AS (
  SELECT `table`, sum(records) AS records FROM warehouse_files GROUP BY `table`
),
names AS (
  SELECT DISTINCT `table` FROM warehouse_snapshots WHERE NOT endswith(`table`, '_dead_letters')
)
SELECT n.`table`,
       coalesce(d.records, 0) AS rows,
       coalesce(dl.records, 0) AS dead_letters,
       round(coalesce(dl.records, 0)
             / greatest(coalesce(d.records, 0) + coalesce(dl.records, 0), 1), 6)
         AS dead_letter_fraction
FROM names n
LEFT JOIN per_table d ON d.`table` = n.`table`
LEFT JOIN per_table dl ON dl.`table` = concat(n.`table`, '_dead_letters')
