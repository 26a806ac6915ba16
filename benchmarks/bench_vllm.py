"""vLLM backend: concurrent vs sequential requests, and the per-stage server start-up time.

A per-stage server is started on a tiny policy exactly as a stage starts one (``VllmServer.start``), then
64 prompts x 4 samples are sent once with one request in flight (the old behaviour) and once with up to
``--in-flight`` requests in flight (``VllmServerGenerator``); both runs use the same per-prompt seeds and
must return the same samples. Target: >= 4x. Needs `.venv-vllm` (scripts/setup_vllm_cpu.sh).

Run: .venv/bin/python benchmarks/bench_vllm.py   (~2-4 min on 2 cores)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rla_core.config import Backend, SamplingConfig, ServingConfig
from rla_core.models.bootstrap import ensure_tiny_model
from rla_core.models.generator import VllmServerGenerator
from rla_core.models.serving import VllmServer, served_name

REPO = Path(__file__).resolve().parents[1]
PROMPTS = [f"You are in room {i}. Goal: take the key and open the chest. Action:" for i in range(64)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interpreter", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--starts", type=int, default=2, help="server starts to time")
    args = parser.parse_args()
    serving = ServingConfig(
        backend=Backend.VLLM, dtype="float32", interpreter=args.interpreter, max_in_flight=args.in_flight,
        extra_args=("--max-model-len", "512", "--max-num-seqs", "256", "--enforce-eager", "--no-enable-chunked-prefill"),
    )  # fmt: skip
    # EOS-free budget: every sample produces exactly new_tokens unless it samples EOS.
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=args.new_tokens)
    seeds = [1000 + i for i in range(len(PROMPTS))]
    with tempfile.TemporaryDirectory() as cache:
        model = ensure_tiny_model("policy", corpus=PROMPTS, cache_dir=Path(cache))
        runtime = Path(cache) / "runtime"
        startups = []
        for i in range(args.starts):
            t = time.perf_counter()
            server = VllmServer.start(
                model, name=served_name(f"bench{i}", "policy"), role="policy", serving=serving,
                runtime_dir=runtime,
            )  # fmt: skip
            startups.append(time.perf_counter() - t)
            if i + 1 < args.starts:
                t = time.perf_counter()
                server.stop()
                print(f"start {i}: ready in {startups[-1]:.1f}s, stopped in {time.perf_counter() - t:.1f}s")
        with server:
            print(f"start {args.starts - 1}: ready in {startups[-1]:.1f}s")
            timings = {}
            outputs = {}
            for in_flight in (1, args.in_flight):
                gen = VllmServerGenerator(server.base_url, model=server.name, max_in_flight=in_flight)
                gen.generate(PROMPTS[:2], n=1, sampling=sampling, seed=0)  # warm-up
                t = time.perf_counter()
                outputs[in_flight] = gen.generate(
                    PROMPTS, n=args.samples, sampling=sampling, seed=0, seeds=seeds
                )
                timings[in_flight] = time.perf_counter() - t
                gen.close()
        same = outputs[1] == outputs[args.in_flight]
        tokens = sum(g.completion_tokens for s in outputs[1] for g in s)
        print(
            f"prompts={len(PROMPTS)} samples={args.samples} max_new_tokens={args.new_tokens} tokens={tokens}"
        )
        for in_flight, seconds in timings.items():
            print(f"in flight {in_flight:>3}: {seconds:.2f}s = {tokens / seconds:.0f} tokens/s")
        ratio = timings[1] / timings[args.in_flight]
        print(f"speed-up: {ratio:.1f}x (target >= 4x); same samples: {same}")
        print(f"server start-up (per stage): {', '.join(f'{s:.1f}s' for s in startups)}")


if __name__ == "__main__":
    main()
