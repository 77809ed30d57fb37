#!/usr/bin/env bash
# Calibrate the GPU this container runs on: start vLLM with the given `vllm serve` flags, wait
# (bounded) until it is healthy, run TokenPilot's interference probe against it, and stop it.
#   tokenpilot-calibrate --model /models/x --max-num-batched-tokens 8192 ...
# Environment: CALIBRATE_PORT (8000), CALIBRATE_STARTUP_TIMEOUT_S (1200), CALIBRATE_PROBE_ARGS.
set -euo pipefail
port="${CALIBRATE_PORT:-8000}"
startup_timeout_s="${CALIBRATE_STARTUP_TIMEOUT_S:-1200}"

python3 -m vllm.entrypoints.openai.api_server --host 127.0.0.1 --port "$port" "$@" &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT

deadline=$((SECONDS + startup_timeout_s))
until python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=5)" \
    "http://127.0.0.1:$port/health" 2>/dev/null; do
  if ! kill -0 "$server" 2>/dev/null; then
    echo "tokenpilot-calibrate: vLLM exited before it became healthy; see its log above" >&2
    exit 1
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "tokenpilot-calibrate: vLLM not healthy after ${startup_timeout_s}s;" \
      "raise CALIBRATE_STARTUP_TIMEOUT_S for large models" >&2
    exit 1
  fi
  sleep 2
done

# shellcheck disable=SC2086  # CALIBRATE_PROBE_ARGS is a list of flags
/opt/tokenpilot/bin/tokenpilot probe --url "http://127.0.0.1:$port" ${CALIBRATE_PROBE_ARGS:-}
