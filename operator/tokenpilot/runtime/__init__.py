"""The operator's long-running loops, between its kopf entry points (tokenpilot.handlers) and
the adapters: what is scheduled, how many at once, and which actions reach the cluster."""
