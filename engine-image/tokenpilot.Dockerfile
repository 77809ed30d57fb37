# TokenPilot in two images, built from the repository root: the operator image holds only the
# operator distribution (`tokenpilot`); the engine-sim image adds the lab (`tokenpilot-lab`).
#   docker build -f engine-image/tokenpilot.Dockerfile --target operator   -t tokenpilot/operator:0.1.0 .
#   docker build -f engine-image/tokenpilot.Dockerfile --target engine-sim -t tokenpilot/engine-sim:0.1.0 .
# `make images` builds both with podman from a Debian base made locally (hack/build-images.sh).
# Both run as an unprivileged user and write nothing outside /tmp, so the chart can make the
# root filesystem read-only. Every installed distribution is pinned by constraints.txt, and the
# build fails if one is not (check-pins.py).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# No PIP_NO_CACHE_DIR: hack/build-images.sh mounts the host's pip cache at build time; without
# it the cache stays in this stage, which no final image copies.
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY engine-image/constraints.txt engine-image/check-pins.py ./
COPY pyproject.toml README.md ./
COPY operator ./operator
# The built-in GPU profiles, installed as the package's data files (share/tokenpilot/gpus).
COPY policies ./policies
RUN python -m venv /opt/tokenpilot \
 && /opt/tokenpilot/bin/pip install --constraint constraints.txt . \
 && /opt/tokenpilot/bin/python check-pins.py constraints.txt tokenpilot \
 && find /opt/tokenpilot -name '__pycache__' -prune -exec rm -rf {} +

FROM build AS build-lab
COPY lab ./lab
RUN /opt/tokenpilot/bin/pip install --constraint constraints.txt ./lab \
 && /opt/tokenpilot/bin/python check-pins.py constraints.txt tokenpilot tokenpilot-lab \
 && find /opt/tokenpilot -name '__pycache__' -prune -exec rm -rf {} +

FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/tokenpilot/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# The user has a name: kopf names the operator after it (getpass), which reads /etc/passwd when
# no USER is set, and a kubelet sets none (podman adds a passwd entry of its own, so only a
# real node showed it).
RUN echo 'tokenpilot:x:65532:65532:TokenPilot:/tmp:/usr/sbin/nologin' >>/etc/passwd \
 && echo 'tokenpilot:x:65532:' >>/etc/group
USER 65532:65532

FROM runtime AS engine-sim
COPY --from=build-lab /opt/tokenpilot /opt/tokenpilot
EXPOSE 8000
ENTRYPOINT ["tokenpilot", "engine-sim"]
CMD ["--port", "8000"]

FROM runtime AS operator
COPY --from=build /opt/tokenpilot /opt/tokenpilot
EXPOSE 8080 9100
ENTRYPOINT ["tokenpilot"]
CMD ["run"]
