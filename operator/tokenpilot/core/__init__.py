"""Pure decisions: render manifests, tune the token budget, plan capacity, decide replicas,
model the engine.

Purely data-manipulative: nothing here performs I/O, reads the clock or imports kopf,
kubernetes, httpx or a Prometheus client. Time and observations come in as arguments and every
decision returns its reason in words.
"""
