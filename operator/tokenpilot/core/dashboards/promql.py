"""Small PromQL helpers: name the metrics an expression reads.

The metric-name scan is what the dashboard check relies on to fail on a query that names a metric
no component exports, so it must not mistake label names, functions, keywords or Grafana
variables for metric names.
"""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+|\[\[\w+\]\]")
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
# Label lists after these keywords are label names, not metrics.
_LABEL_LIST = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_IDENTIFIER = re.compile(r"(?<![\w:.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without", "on", "ignoring"}
    | {"group_left", "group_right", "atan2", "e"}
)
_DURATION = re.compile(r"^\d+(ms|[smhdwy])")


def metric_names(expression: str) -> frozenset[str]:
    """The metric names an expression selects, e.g. ``rate(a_total[5m]) / b`` gives {a_total, b}.

    A name right before ``(`` is a function or aggregation; ``{__name__="x"}`` is not supported
    because none of our expressions use it.
    """
    text = _STRING.sub('""', expression)
    text = _GRAFANA_VARIABLE.sub("1", text)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _KEYWORDS or _DURATION.match(name):
            continue
        names.add(name)
    return frozenset(names)
