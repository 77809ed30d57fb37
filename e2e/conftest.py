"""The e2e suite runs against the dev cluster (`make test`) or any cluster given by
TOKENPILOT_KUBECONFIG (e2e/run-kind.sh sets it to the kind cluster); same fixtures as tests/."""

pytest_plugins = ["tokenpilot_lab.devcluster.pytest_plugin"]
