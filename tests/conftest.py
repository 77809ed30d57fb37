"""Shared fixtures for every test tier: the dev-cluster plugin (session cluster, per-test
namespace) is loaded here so tests/ and e2e/ use the same one.

Property tests draw the same examples on every run (hypothesis's `derandomize`), so a run of
`make test` on the same commit passes or fails the same way and main stays green on its own
examples; `HYPOTHESIS_PROFILE=explore` draws new ones, to look for counterexamples on purpose.
"""

import os

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

pytest_plugins = ["tokenpilot_lab.devcluster.pytest_plugin"]
