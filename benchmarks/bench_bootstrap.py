"""Time and peak RSS of bootstrapping a tiny model from an empty cache (targets: < 3 min, < 4 GiB).

The bootstrap runs in a fresh subprocess so its import cost and peak memory are measured alone.
Run: .venv/bin/python benchmarks/bench_bootstrap.py
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time

CHILD = """
import sys
from pathlib import Path
from rla_core.models.bootstrap import ensure_tiny_model
corpus = [f"You are in room {i}. Goal: take the key and open chest {i % 7}. Action: \\\\boxed{{{i % 5}}}" for i in range(2000)]
print(ensure_tiny_model("policy", corpus=corpus, cache_dir=Path(sys.argv[1])))
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", CHILD, cache], check=True, env={"HF_HUB_OFFLINE": "1", "PATH": ""}
        )
        dt = time.perf_counter() - t
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    print(
        f"bootstrap from empty cache: {dt:.1f}s (target < 180s), peak RSS {peak_kib / 2**20:.2f} GiB (target < 4 GiB)"
    )


if __name__ == "__main__":
    main()
