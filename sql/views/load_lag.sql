-- load_lag: per table and topic-partition, how far the table is behind the log.
--
-- committed_offset is the next offset the table will load: the kafkastore.offsets
-- of the newest snapshot of the table's main branch that carries them
-- (warehouse_offsets). A partition the table never loaded counts from the log start.
-- lost > 0 means retention deleted records the table had not loaded yet.
-- Dead-letter tables are left out: their offsets move only when a load has
-- dead letters to commit.
CREATE OR REPLACE TEMPORARY VIEW load_lag AS
WITH loaded AS (
  SELECT DISTINCT `table`, topic FROM warehouse_offsets
  WHERE NOT endswith(`table`, '_dead_letters')
)
SELECT l.`table`, o.topic, o.partition,
       o.log_start_offset, o.high_watermark, c.committed_offset,
       o.high_watermark - greatest(coalesce(c.committed_offset, o.log_start_offset),
                                   o.log_start_offset) AS lag,
       greatest(o.log_start_offset - coalesce(c.committed_offset, o.log_start_offset), 0) AS lost,
       c.committed_at AS last_commit_time
FROM loaded l
JOIN kafkastore_offsets o ON o.topic = l.topic
LEFT JOIN warehouse_offsets c
  ON c.`table` = l.`table` AND c.topic = o.topic AND c.partition = o.partition
