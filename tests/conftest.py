"""Shared fixtures for every test tier: the dev-cluster plugin (session cluster, per-test
namespace) is loaded here so tests/ and e2e/ use the same one."""

pytest_plugins = ["tokenpilot_lab.devcluster.pytest_plugin"]
