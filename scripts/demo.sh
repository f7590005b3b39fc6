#!/usr/bin/env bash
# The whole story on the embedded default (a local root, local Spark):
# topics -> produce -> consume -> load exactly-once -> compact -> SQL.
# Run through `./run demo`, which sets up the venv first.
set -euo pipefail
cd "$(dirname "$0")/.."
export KAFKASTORE_CONF=${KAFKASTORE_CONF:-conf/kafkastore.yaml}
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

rm -rf demo
say "1. Create the topics listed in $KAFKASTORE_CONF"
run kafkastore topics apply
run kafkastore topics list

say "2. Produce a sample stream (JSON lines on stdin; keys partitioned by murmur2 as Kafka does)"
python scripts/sample_data.py orders 20000 --seed 1 | run kafkastore produce orders
python scripts/sample_data.py customers 3000 --seed 1 | run kafkastore produce customers --flush-every 500

say "3. Read it back"
run kafkastore consume orders --partition 0 --limit 2
run kafkastore offsets orders
run kafkastore verify orders

say "4. Load into the warehouse, exactly once (offsets are stored with the output)"
run kafkastore load orders --table order_events --run-id demo-1
run kafkastore load orders --table order_events --run-id demo-1   # same run id: a no-op
python scripts/sample_data.py orders 5000 --seed 2 | run kafkastore produce orders
run kafkastore load orders --table order_events --run-id demo-2   # only the new offsets
run kafkastore load customers --table customer_events
run kafkastore offsets orders --warehouse file://./demo/warehouse

say "5. Compact the customers topic (last value per key; tombstones kept for delete.retention.ms)"
run kafkastore compact customers
run kafkastore consume customers --partition 0 --limit 2

say "6. SQL over topics and tables"
run kafkastore sql "SELECT partition, count(*) AS records, min(offset) AS first, max(offset) AS last FROM orders GROUP BY partition ORDER BY partition"
run kafkastore sql --file sql/examples/orders_per_hour.sql
run kafkastore sql "SELECT count(*) AS rows, count(DISTINCT order_id) AS orders FROM order_events" --format jsonl

say "Done. Look at:"
echo "  demo/log/topics/<topic>/<partition>/   Kafka-format segments (.log/.index/.timeindex) and _manifest/"
echo "  demo/warehouse/<table>/               Parquet files and the _commits/ log with offset ranges"
echo "  ./run shell, then: kafkastore --help"
