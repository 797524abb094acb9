#!/usr/bin/env bash
# Lockstep duplex capacity at full size on one GPU: Moshi 7B's geometry with random weights, bfloat16,
# batch 1..32, 80 ms frames. Run on a GPU machine where livegen is installed with a CUDA build of torch
# (pip install -e ".[voice-duplex]"); no weights and no network needed. Writes the table as markdown
# (for docs/capacity.md) and every figure as JSON.
#
#   scripts/gpu_duplex_bench.sh [OUT.md] [extra bench options, e.g. --sizes 1,2,4,8,16,32,48]
#
# The goal (issue 25): at least 32 sessions held at 80 ms frames with no missed frame on one H200
# (PersonaPlex's own server: 32 at 70.2 ms per frame). The state pool is sized for the largest batch:
# about 1.6 GB of KV per session at 7B (32 layers x 3000 frames x 4096 x K,V in bfloat16) plus ~16 GB
# of weights, so 32 sessions need ~68 GB.
set -euo pipefail

out="${1:-duplex-gpu.md}"
shift || true
json="${out%.md}.json"

python - <<'PY'
import sys
import torch
if not torch.cuda.is_available():
    sys.exit("no CUDA device visible to torch: this script measures the GPU path (install a CUDA build of torch)")
print(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}", file=sys.stderr)
PY

livegen bench voice-duplex --geometry 7b --device cuda --dtype bfloat16 \
    --sizes 1,2,4,8,16,32 --steps 50 --warmup 5 \
    --markdown "$out" --json "$json" "$@" >/dev/null

{
    echo
    echo "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo unknown)"
    echo "Measured $(date -u +%Y-%m-%dT%H:%MZ) with scripts/gpu_duplex_bench.sh."
} >>"$out"
cat "$out"
echo "wrote $out and $json" >&2
