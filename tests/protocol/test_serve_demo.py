"""The README's serve demo runs end to end: a broker, a confluent-kafka producer and a
committing consumer group, then the CLI reading the same log and offsets without the broker."""
import json
import os
import subprocess
import sys

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_serve_demo_produces_consumes_and_commits(tmp_path):
    root = f"file://{tmp_path}/log"
    out = subprocess.run([sys.executable, os.path.join(ROOT_DIR, "scripts", "serve_demo.py"),
                          "--root", root, "--topic", "clicks", "--records", "60"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "consumed 60 records back through the broker" in out.stdout
    offsets = json.loads(subprocess.run(
        [sys.executable, "-m", "kafkastore.cli", "--root", root, "offsets", "clicks"],
        capture_output=True, text=True, check=True).stdout)
    assert sum(p["high_watermark"] for p in offsets["partitions"].values()) == 60
    described = subprocess.run(
        [sys.executable, "-m", "kafkastore.cli", "--root", root, "groups", "describe", "demo"],
        capture_output=True, text=True, check=True).stdout
    group = json.loads(described)  # the group's committed offsets outlive the broker
    assert sum(o["current_offset"] for o in group["offsets"]) == 60
    assert all(o["lag"] == 0 for o in group["offsets"])
