"""vLLM generation: the project's ``VllmServerGenerator`` vs one bare ``/v1/completions`` request, same server.

Serves the random Qwen2 checkpoint of ``qwen2_random.py`` with the project's own :meth:`VllmServer.start`
(``models.serving.dtype`` given explicitly, bfloat16 by default), then sends ``--prompts`` prompts of
``--prompt-tokens`` tokens, ``--new-tokens`` new tokens each, temperature 1, top-p 1:

* project: ``VllmServerGenerator.generate`` (one seeded request per prompt, ``max_in_flight`` in flight);
* bare: one request carrying every prompt as a list (vLLM batches it itself), no seeds.

ratio = project seconds per token / bare seconds per token. Needs the vLLM environment
(``--interpreter``, default ``.venv-vllm/bin/python``) and a CUDA GPU; without either it exits 2.

Run on a GPU:  python benchmarks/gpu/vllm_generation.py --interpreter .venv-vllm/bin/python
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from qwen2_random import SIZES, add_size_args, build, exact_prompt, result_line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interpreter", default=".venv-vllm/bin/python")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--startup-timeout", type=float, default=240.0)
    add_size_args(parser)
    args = parser.parse_args()

    import httpx
    import torch
    from transformers import AutoTokenizer

    from rla_core.config import Backend, SamplingConfig, ServingConfig
    from rla_core.errors import ModelError
    from rla_core.models.generator import VllmServerGenerator
    from rla_core.models.serving import VllmServer, resolve_interpreter

    if not torch.cuda.is_available():
        print("vllm_generation: no CUDA device visible", flush=True)
        return 2
    try:
        resolve_interpreter(args.interpreter)
    except ModelError as err:
        print(f"vllm_generation: vLLM is not installed here ({err})", flush=True)
        return 2
    path = build(SIZES[args.size], args.cache_dir)
    tok = AutoTokenizer.from_pretrained(path)
    rng = random.Random(11)
    prompts = [exact_prompt(tok, args.prompt_tokens, rng) for _ in range(args.prompts)]
    serving = ServingConfig(
        backend=Backend.VLLM, interpreter=args.interpreter, dtype=args.dtype,
        startup_timeout_s=args.startup_timeout, max_in_flight=args.prompts,
    )  # fmt: skip
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=args.new_tokens)
    with VllmServer.start(path, name="bench-vllm", role="policy", serving=serving) as server:
        gen = VllmServerGenerator(server.base_url, model="bench-vllm", max_in_flight=args.prompts)
        client = httpx.Client(base_url=server.base_url, timeout=600.0)

        def project() -> tuple[float, int]:
            start = time.perf_counter()
            out = gen.generate(prompts, n=1, sampling=sampling, seed=1)
            return time.perf_counter() - start, sum(g.completion_tokens for row in out for g in row)

        def bare() -> tuple[float, int]:
            body = {"model": "bench-vllm", "prompt": prompts, "max_tokens": args.new_tokens,
                    "temperature": 1.0, "top_p": 1.0}  # fmt: skip
            start = time.perf_counter()
            resp = client.post("/completions", json=body)
            resp.raise_for_status()
            return time.perf_counter() - start, int(resp.json()["usage"]["completion_tokens"])

        project()
        bare()  # warm-up of both paths
        (p_s, p_tok), (b_s, b_tok) = project(), bare()
        gen.close()
        client.close()
    fields = {
        "dtype": args.dtype, "size": args.size, "prompts": args.prompts, "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens, "startup_s": round(server.startup_s, 1),
        "generator_tok_s": round(p_tok / p_s), "bare_tok_s": round(b_tok / b_s),
        "ratio": round((p_s / p_tok) / (b_s / b_tok), 3),
    }  # fmt: skip
    print(result_line("vllm", fields), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
