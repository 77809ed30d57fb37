"""The e2e suite runs against the dev cluster (`make test`) or any cluster given by
TOKENPILOT_KUBECONFIG (e2e/run-kind.sh sets it to the kind cluster); same fixtures as tests/.

Two parts belong to one kind of cluster only: e2e/kind/ needs real nodes (run-kind.sh sets
TOKENPILOT_KIND_CLUSTER), and test_images.py starts a dev cluster of its own whose pod runner
runs the images as podman containers, which a kind run has no use for.
"""

import os

pytest_plugins = ["tokenpilot_lab.devcluster.pytest_plugin"]

collect_ignore = ["test_images.py"] if os.environ.get("TOKENPILOT_KIND_CLUSTER") else ["kind"]
