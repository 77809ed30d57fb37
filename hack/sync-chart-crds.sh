#!/usr/bin/env bash
# Copy the generated CRDs (crds/, written by `tokenpilot crd`) into the Helm chart's crds/ so
# the chart installs the same bytes. tests/unit/test_chart.py fails when they differ.
# Usage: hack/sync-chart-crds.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
src=crds
dst=helm/tokenpilot/crds
if [ "${1:-}" = "--check" ]; then
  if diff -r "$src" "$dst" >/dev/null; then
    exit 0
  fi
  echo "$dst differs from $src: run hack/sync-chart-crds.sh" >&2
  diff -r "$src" "$dst" >&2 || true
  exit 1
fi
mkdir -p "$dst"
find "$dst" -maxdepth 1 -name '*.yaml' -delete
cp "$src"/*.yaml "$dst"/
echo "copied $(ls "$src"/*.yaml | wc -l) CRD file(s) from $src to $dst"
