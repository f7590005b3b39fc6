#!/usr/bin/env bash
# The whole story on the embedded default (a local root, local Spark):
# topics -> produce (CLI and a Kafka client through `kafkastore serve`) -> consume -> load exactly-once into Iceberg -> validate -> compact -> SQL.
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

say "2b. A Kafka client (confluent-kafka) produces and consumes through \`kafkastore serve\`"
run python scripts/serve_demo.py --root "file://$PWD/demo/log" --topic clicks --records 1000

say "3. Read it back"
run kafkastore consume orders --partition 0 --limit 2
run kafkastore offsets orders
run kafkastore verify orders

say "4. Load into the Iceberg warehouse, exactly once (offsets are stored in each snapshot's summary)"
run kafkastore load orders --table order_events --run-id demo-1
run kafkastore load orders --table order_events --run-id demo-1   # same run id: a no-op
python -m pipelines.quality --table order_events   # GX checks; a pass moves the 'validated' tag
python scripts/sample_data.py orders 5000 --seed 2 | run kafkastore produce orders
run kafkastore load orders --table order_events --run-id demo-2   # only the new offsets
run kafkastore load customers --table customer_events
run kafkastore offsets orders --warehouse file://./demo/warehouse

say "5. Compact the customers topic (last value per key; tombstones kept for delete.retention.ms)"
run kafkastore compact customers
run kafkastore consume customers --partition 0 --limit 2

say "6. SQL over topics and Iceberg tables (each table view reads exactly one snapshot)"
run kafkastore sql "SELECT partition, count(*) AS records, min(offset) AS first, max(offset) AS last FROM orders GROUP BY partition ORDER BY partition"
run kafkastore sql --file sql/examples/orders_per_hour.sql
run kafkastore sql "SELECT count(*) AS rows, count(DISTINCT order_id) AS orders FROM order_events" --format jsonl
# main holds both loads; the validated tag only the first (demo-2 is not validated yet)
run kafkastore sql --file sql/examples/validated_vs_all.sql
first=$(kafkastore sql "SELECT snapshot_id FROM warehouse_snapshots WHERE run_id = 'demo-1'" --format jsonl | python -c 'import json,sys; print(json.loads(sys.stdin.readline())["snapshot_id"])')
run kafkastore sql "SELECT count(*) AS rows_then FROM order_events" --as-of-snapshot "$first"   # time travel

say "7. Any Iceberg reader sees the same table (here pyiceberg, not kafkastore's code)"
python - <<'PY'
from pyiceberg.catalog import load_catalog
import os
catalog = load_catalog("kafkastore", type="sql", warehouse="file://" + os.path.abspath("demo/warehouse"),
                       uri="sqlite:///" + os.path.abspath("demo/warehouse/catalog.db"))
table = catalog.load_table("default.order_events")
print(f"$ pyiceberg: load_table('default.order_events').scan().to_arrow(): {table.scan().to_arrow().num_rows} rows")
print(f"  metadata file (for DuckDB's iceberg_scan, Trino register_table...): {table.metadata_location}")
PY

say "Done. Look at:"
echo "  demo/log/topics/<topic>/<partition>/   Kafka-format segments (.log/.index/.timeindex) and _manifest/"
echo "  demo/warehouse/catalog.db              the embedded Iceberg catalog (SQLite)"
echo "  demo/warehouse/default/<table>/        Iceberg tables: data/ (Parquet) and metadata/ (snapshots)"
echo "  demo/warehouse/_quality/<table>/       Great Expectations data docs of each validation"
echo "  ./run shell, then: kafkastore --help"
