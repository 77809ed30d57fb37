"""The I/O twins of the core: Kubernetes (apply, scale, watch), Prometheus, pod scraping,
files and the clock. Adapters move data; they do not decide.
"""
