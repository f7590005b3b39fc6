-- Dead letters: the totals per table, then the latest failures of `order_events`
-- with their error text and raw value (as text).
--   kafkastore sql --file sql/examples/dead_letters.sql
SELECT * FROM dead_letters_per_table ORDER BY dead_letter_fraction DESC, `table`;

SELECT partition, offset, timestamp, error, CAST(value AS STRING) AS value
FROM order_events_dead_letters
ORDER BY timestamp DESC, partition, offset
LIMIT 20
