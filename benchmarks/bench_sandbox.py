"""Sandboxed executions per second of a trivial program, and the overhead vs. running it unsandboxed.

Run as root: .venv/bin/python benchmarks/bench_sandbox.py  (~15 s). Target: >= 20 executions/s on 2 cores.
Wall-clock numbers depend on what else the machine runs; the CPU time per run (this process plus every
process of the run: sh, setpriv, bwrap, the launcher, the program) does not, and bounds the rate an idle
machine reaches: cores / CPU time per run.
"""

from __future__ import annotations

import os
import resource
import subprocess
import time

from rla_core.sandbox.runner import Job, Limits, Sandbox

N = 100
CODE = "print(sum(map(int, input().split())))"


def _cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    sb = Sandbox()
    limits = Limits(wall_s=2.0, cpu_s=1)
    jobs = [Job(code=CODE, stdin="1 2 3\n", limits=limits) for _ in range(N)]
    start = time.perf_counter()
    results = sb.run_many(jobs)
    elapsed = time.perf_counter() - start
    assert all(r.stdout == "6\n" for r in results)
    cpu0 = _cpu_s()
    serial = [sb.run_program(CODE, "1 2 3\n", limits=limits).wall_s for _ in range(20)]
    cpu_sb = (_cpu_s() - cpu0) / 20
    plain = []
    cpu0 = _cpu_s()
    for _ in range(20):
        t = time.perf_counter()
        subprocess.run(
            [sb.python, "-S", "-I", "-B", "-c", CODE], input=b"1 2 3\n", capture_output=True, check=True
        )
        plain.append(time.perf_counter() - t)
    cpu_plain = (_cpu_s() - cpu0) / 20
    per_sb = sorted(serial)[len(serial) // 2]
    per_plain = sorted(plain)[len(plain) // 2]
    print(f"cores: {os.cpu_count()}, parallel: {sb.max_parallel}, load average: {os.getloadavg()[0]:.1f}")
    print(f"sandboxed executions/s (parallel, {N} runs): {N / elapsed:.1f}")
    print(f"median sandboxed run: {per_sb * 1000:.1f} ms; unsandboxed: {per_plain * 1000:.1f} ms")
    print(f"per-execution overhead: {(per_sb - per_plain) * 1000:.1f} ms")
    print(f"CPU time per run: sandboxed {cpu_sb * 1000:.1f} ms; unsandboxed {cpu_plain * 1000:.1f} ms")


if __name__ == "__main__":
    main()
