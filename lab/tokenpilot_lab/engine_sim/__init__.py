"""`tokenpilot engine-sim`: the engine model behind vLLM's HTTP API, on the wall clock.

options.py   the `vllm serve` flags it accepts, checked at start
timing.py    the step timer and KV capacity for a GPU SKU and model shape
driver.py    runs engine steps in (scaled) real time and hands tokens to requests
metrics.py   vLLM's /metrics families, filled from the engine's steps
server.py    the aiohttp app: /v1/completions, /v1/chat/completions, /v1/models, ...
"""
