"""Every GPU measurement of the project in one command, inside a 10-minute budget, printed as one table.

Steps (each a subprocess with its own timeout, cut to what is left of ``--budget-s``; a step whose share
cannot start is reported as skipped):

| step | script | what |
|---|---|---|
| train_check | ``train_check.py --rows 64`` | the test preset's updates with bf16 autocast: fp32 checkpoints, weights moved |
| update | ``update.py`` | padded vs packed ``rl_update`` and a plain torch loop, 0.5 B Qwen2, 128 rows of 128-512 tokens, bf16 autocast, MFU against the measured bf16 matmul peak |
| generation | ``generation.py`` | ``TransformersGenerator`` vs bare ``generate``, 64 prompts x 256 + 128 tokens, fp32 and bf16 |
| vision_language | ``vision_language.py`` | the tiny VL checkpoint generating from image prompts on CUDA, batch independence |
| vllm | ``vllm_generation.py`` | ``VllmServerGenerator`` vs one bare request to the same server (skipped without vLLM) |

Each script prints a ``RESULT <name> {json}`` line; the table shows the chosen fields of each, its exit code
and seconds. Logs go to ``--out`` (one file per step). Exit code: 2 without CUDA (nothing run), 1 when a
step failed, else 0.

Run (one GPU):  python benchmarks/gpu/run_all.py [--out /tmp/rla-gpu] [--vllm-interpreter .venv-vllm/bin/python]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# (name, script arguments, seconds it may take at most, RESULT fields shown in the table)
STEPS: list[tuple[str, list[str], int, tuple[str, ...]]] = [
    ("train_check", ["train_check.py", "--rows", "64"], 150, ()),
    ("update", ["update.py"], 240, ("peak_bf16_tflops", "padded_loop_s", "packed_loop_s", "reference_loop_s",
                                    "speedup_packed", "padded_padding_share", "packed_padding_share",
                                    "padded_mfu", "packed_mfu", "packed_peak_gib")),
    ("generation", ["generation.py"], 150, ("fp32_generator_tok_s", "fp32_bare_tok_s", "fp32_ratio",
                                            "bf16_generator_tok_s", "bf16_bare_tok_s", "bf16_ratio")),
    ("vision_language", ["vision_language.py"], 60, ("dtype", "tok_s", "batch_independent")),
    ("vllm", ["vllm_generation.py"], 240, ("generator_tok_s", "bare_tok_s", "ratio", "startup_s")),
]  # fmt: skip


def _result(log: str) -> dict[str, object]:
    lines = [line for line in log.splitlines() if line.startswith("RESULT ")]
    return json.loads(lines[-1].split(" ", 2)[2]) if lines else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=int, default=570, help="all steps together (default: 9.5 min)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/rla-gpu"))
    parser.add_argument("--vllm-interpreter", default=".venv-vllm/bin/python")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("run_all: no CUDA device visible: these measurements need a GPU (nothing was run)", flush=True)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    rows = []
    failed = False
    for name, argv, cap, shown in STEPS:
        if name == "vllm":
            argv = [*argv, "--interpreter", args.vllm_interpreter]
        left = args.budget_s - (time.monotonic() - started)
        limit = min(cap, int(left))
        if limit < 20:
            rows.append((name, "skipped", 0.0, "total budget spent"))
            continue
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, str(HERE / argv[0]), *argv[1:]],
                capture_output=True,
                text=True,
                timeout=limit,
            )
            code, log = str(proc.returncode), proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as err:
            code = f"timeout {limit}s"
            log = (err.stdout or b"").decode() + (err.stderr or b"").decode()  # type: ignore[union-attr]
        (args.out / f"{name}.log").write_text(log)
        result = _result(log)
        if name == "train_check":
            shown_text = " ".join(line.strip() for line in log.splitlines() if "samples/s" in line)
        elif code == "2":
            shown_text = "skipped: " + (log.strip().splitlines() or [""])[-1]
        else:
            shown_text = " ".join(f"{k}={result[k]}" for k in shown if k in result)
        failed = failed or code not in ("0", "2")
        rows.append((name, code, time.monotonic() - t0, shown_text or f"see {args.out / (name + '.log')}"))
    print(f"\nGPU measurements ({torch.cuda.get_device_name(0)}, torch {torch.__version__}; "
          f"total {time.monotonic() - started:.0f} s; logs in {args.out})")  # fmt: skip
    print(
        "(ratio = project time / bare reference time on the same model and inputs; > 1: the project is slower)"
    )
    print(f"| {'step':15s} | {'rc':>10s} | {'s':>5s} | result")
    print(f"|{'-' * 17}|{'-' * 12}|{'-' * 7}|{'-' * 60}")
    for name, code, secs, text in rows:
        print(f"| {name:15s} | {code:>10s} | {secs:5.0f} | {text}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
