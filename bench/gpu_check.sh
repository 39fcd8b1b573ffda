#!/usr/bin/env bash
# flowserve's checks on a CUDA GPU, in one run, each stage under its own time limit so a
# stage that hangs costs only its own figures:
#   env    what is there: the GPU, CUDA/cuDNN libraries, onnxruntime's providers, CuPy, torch
#   tests    the tests marked gpu (eager on CuPy, graphs on the CUDA provider, serving)
#   example  examples/gpu_train_and_serve.py
#   serve  bench/bench_gpu_serving.py: flowserve serve --device cuda against ONNX Runtime
#          CUDA in process, fp16 against fp32
#   train  bench/bench_gpu_training.py: nn.Graph training steps against PyTorch eager and
#          torch.compile on the GPU
# Logs and JSON lines go to $OUT (default ./gpu-check-out); the last lines printed are a
# summary. Needs flowserve installed with onnxruntime-gpu (pip install -e ".[cuda,test]").
#
#   bench/gpu_check.sh                 # every stage
#   bench/gpu_check.sh tests serve     # some stages
#   GPU_CHECK_SCALE=0.5 bench/gpu_check.sh   # every stage's time limit halved
#   GPU_CHECK_TESTS=tests/gpu/test_graph_cuda.py bench/gpu_check.sh tests   # some test files
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
SCALE=${GPU_CHECK_SCALE:-1}
export PYTHONUNBUFFERED=1
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(env tests example serve train)

limit() { python3 -c "print(max(10, int($1 * $SCALE)))"; }

run_stage() {  # name, seconds, command...
    local name=$1 seconds; seconds=$(limit "$2"); shift 2
    local started=$SECONDS
    echo "== $name (limit ${seconds}s)"
    timeout --kill-after=10 "$seconds" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    tail -n 40 "$OUT/$name.log"
    echo "== $name: rc=$rc in $((SECONDS - started))s" | tee -a "$OUT/summary.txt"
}

for stage in "${stages[@]}"; do
    case $stage in
    env)
        run_stage env 60 python3 bench/gpu_env.py
        ;;
    tests)
        parallel=$(python3 -c "import xdist" 2>/dev/null && echo "-n 8")  # pytest-xdist where installed
        run_stage tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu -rfE --timeout 120 $parallel \
            --junitxml="$OUT/tests.xml" ${GPU_CHECK_TESTS:-tests/gpu tests/core/test_devices.py}
        ;;
    example)
        run_stage example 90 python3 examples/gpu_train_and_serve.py
        ;;
    serve)
        run_stage serve 150 python3 bench/bench_gpu_serving.py --seconds 2 --out "$OUT/serving.jsonl"
        ;;
    train)
        run_stage train 170 python3 bench/bench_gpu_training.py --budget-s "$(limit 140)" --no-compile \
            --only resnet50,mobilenet_v2/fp32,transformer --steps 5 --rounds 3 --warmup 2 --out "$OUT/training.jsonl"
        ;;
    *)
        echo "unknown stage $stage (env, tests, example, serve, train)"; exit 2
        ;;
    esac
done
echo "== summary"; cat "$OUT/summary.txt"
