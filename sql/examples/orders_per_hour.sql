-- Records per hour and partition of the `orders` topic, read straight from the log,
-- with the order amounts summed from the JSON values.
--   kafkastore sql --file sql/examples/orders_per_hour.sql
SELECT date_trunc('HOUR', timestamp) AS hour,
       partition,
       count(*) AS records,
       round(sum(CAST(get_json_object(CAST(value AS STRING), '$.amount') AS DOUBLE)), 2) AS amount
FROM orders
GROUP BY 1, 2
ORDER BY hour, partition
