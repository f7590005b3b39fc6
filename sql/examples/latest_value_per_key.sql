-- The latest value per key of the compacted `customers` topic (what a consumer
-- rebuilding a table from the topic would end up with). A key whose latest
-- record is a tombstone (null value) is deleted, so it is left out.
--   kafkastore sql --file sql/examples/latest_value_per_key.sql
WITH ranked AS (
  SELECT key, value, partition, offset, timestamp,
         row_number() OVER (PARTITION BY partition, key ORDER BY offset DESC) AS rn
  FROM customers
  WHERE key IS NOT NULL
)
SELECT CAST(key AS STRING) AS key,
       CAST(value AS STRING) AS value,
       partition, offset, timestamp
FROM ranked
WHERE rn = 1 AND value IS NOT NULL
ORDER BY key
