"""kopf entry points, a few lines each: read inputs, call the core, hand decisions to adapters."""
