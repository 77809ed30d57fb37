"""Dashboards and alerts as code: Grafana dashboard models and Prometheus rule groups as data.

Purely data-manipulative, like the rest of ``core``: builders return dicts and text, and the
``tokenpilot dashboards`` command writes them. ``slo`` holds the arithmetic (windows, burn-rate
factors, bucket edges), ``rules`` the recording and alerting rules, ``grafana`` and ``boards``
the dashboards, ``promql`` the metric-name scan the dashboard check uses, ``files`` the bytes.
"""
