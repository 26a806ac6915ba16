"""Sandboxed executions per second of a trivial program, and the overhead vs. running it unsandboxed.

Run as root: .venv/bin/python benchmarks/bench_sandbox.py  (~10 s). Target: >= 20 executions/s on 2 cores.
"""

from __future__ import annotations

import os
import subprocess
import time

from rla_core.sandbox.runner import Job, Limits, Sandbox

N = 100
CODE = "print(sum(map(int, input().split())))"


def main() -> None:
    sb = Sandbox()
    limits = Limits(wall_s=2.0, cpu_s=1)
    jobs = [Job(code=CODE, stdin="1 2 3\n", limits=limits) for _ in range(N)]
    start = time.perf_counter()
    results = sb.run_many(jobs)
    elapsed = time.perf_counter() - start
    assert all(r.stdout == "6\n" for r in results)
    serial = [sb.run_program(CODE, "1 2 3\n", limits=limits).wall_s for _ in range(20)]
    plain = []
    for _ in range(20):
        t = time.perf_counter()
        subprocess.run(
            [sb.python, "-S", "-I", "-B", "-c", CODE], input=b"1 2 3\n", capture_output=True, check=True
        )
        plain.append(time.perf_counter() - t)
    per_sb = sorted(serial)[len(serial) // 2]
    per_plain = sorted(plain)[len(plain) // 2]
    print(f"cores: {os.cpu_count()}, parallel: {sb.max_parallel}")
    print(f"sandboxed executions/s (parallel, {N} runs): {N / elapsed:.1f}")
    print(f"median sandboxed run: {per_sb * 1000:.1f} ms; unsandboxed: {per_plain * 1000:.1f} ms")
    print(f"per-execution overhead: {(per_sb - per_plain) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
