-- load_lag: per table and topic-partition, how far the table is behind the log.
--
-- committed_offset is the next offset the table will load: the `until` of the
-- newest commit that covers the partition (a reprocess may move it back).
-- A partition the table never loaded counts from the log start.
-- lost > 0 means retention deleted records the table had not loaded yet.
CREATE OR REPLACE TEMPORARY VIEW load_lag AS
WITH committed AS (
  SELECT `table`, topic, partition,
         max_by(`until`, version) AS committed_offset,
         max(time) AS last_commit_time
  FROM warehouse_commits
  WHERE operation IN ('load', 'reprocess') AND topic IS NOT NULL
  GROUP BY `table`, topic, partition
),
loaded AS (SELECT DISTINCT `table`, topic FROM committed)
SELECT l.`table`, o.topic, o.partition,
       o.log_start_offset, o.high_watermark, c.committed_offset,
       o.high_watermark - greatest(coalesce(c.committed_offset, o.log_start_offset),
                                   o.log_start_offset) AS lag,
       greatest(o.log_start_offset - coalesce(c.committed_offset, o.log_start_offset), 0) AS lost,
       c.last_commit_time
FROM loaded l
JOIN kafkastore_offsets o ON o.topic = l.topic
LEFT JOIN committed c
  ON c.`table` = l.`table` AND c.topic = o.topic AND c.partition = o.partition
