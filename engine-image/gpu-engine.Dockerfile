# The GPU engine: the official vLLM OpenAI image, unchanged as a server, plus TokenPilot's
# calibration entry point. Built from the repository root:
#   docker build -f engine-image/gpu-engine.Dockerfile -t tokenpilot/vllm-openai:v0.32.0 .
# The vLLM version matches the CPU build the metrics-compatibility test runs against.
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0

FROM ${VLLM_IMAGE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# TokenPilot in its own virtualenv so its pins never touch vLLM's.
COPY pyproject.toml README.md /src/tokenpilot/
COPY operator /src/tokenpilot/operator
COPY policies /src/tokenpilot/policies
COPY lab /src/tokenpilot/lab
COPY engine-image/constraints.txt /src/tokenpilot/constraints.txt
# The probe is the lab's, so this image carries the lab beside the operator package.
RUN python3 -m venv /opt/tokenpilot \
 && /opt/tokenpilot/bin/pip install --constraint /src/tokenpilot/constraints.txt \
      /src/tokenpilot /src/tokenpilot/lab \
 && rm -rf /src/tokenpilot
COPY engine-image/tokenpilot-calibrate.sh /usr/local/bin/tokenpilot-calibrate
# The image's own ENTRYPOINT (vLLM's OpenAI server) is kept, so it stays a drop-in for the
# official image; `command: [tokenpilot-calibrate]` runs a calibration instead.
