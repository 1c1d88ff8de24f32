"""Chapter 9's benchmark, rehearsed at small sizes: every method runs, agrees with the others, and is reported."""
from __future__ import annotations

import json
import subprocess
import sys

from course.layout import REPO


def test_the_benchmark_measures_every_method_and_says_what_it_did_not_run(tmp_path):
    out = tmp_path / "figures.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "attention_hardware.py"), "--quick",
                           "--budget-mib", "1", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(out.read_text())
    ran = [row for row in found["attention"] if "skipped" not in row]
    assert {row["method"] for row in ran} == {"plain attention", "tiled_attention (course)", "fused kernel (PyTorch)"}
    assert all(row["agrees"] for row in ran)
    # a 1 MiB budget leaves plain attention out past 256 tokens, and the report says so
    assert [row["T"] for row in found["attention"] if "skipped" in row] == [512, 1024]
    assert "| 512 | plain attention | not run: needs 2 MiB | |" in done.stdout
    writing = {row["method"]: row for row in found["writing"]}
    # greedy writing is the same with and without a cache; the grouped cache is h times smaller
    assert writing["no cache"]["tokens"] == writing["cache"]["tokens"]
    assert writing["cache"]["cache_bytes_per_token"] == 4 * writing["grouped cache"]["cache_bytes_per_token"]
