"""Reading trace files: Azure LLM inference CSV, Mooncake JSONL, or any CSV/JSONL with a mapping.

Rows are streamed into the pure `TraceBuilder` one at a time (no pandas, nothing loaded twice),
so errors name the file and line and memory stays proportional to the requests kept.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from tokenpilot_lab.workload import ColumnMapping, TimeUnit, Trace, TraceBuilder, TraceError
from tokenpilot_lab.workload.parse import AZURE_LLM_MAPPING, MOONCAKE_MAPPING

__all__ = ["mapping_from_spec", "read_trace"]


def read_trace(path: str | Path, mapping: ColumnMapping | None = None) -> Trace:
    """Read a `.csv` or `.jsonl` trace. Without a mapping the format is recognised from the
    header (Azure) or the first object's keys (Mooncake)."""
    file = Path(path)
    source = str(path)
    if not file.is_file():
        raise TraceError("no such file", source=source)
    suffix = file.suffix.lower()
    if suffix == ".csv":
        return _read_csv(file, source, mapping)
    if suffix in (".jsonl", ".json", ".ndjson"):
        return _read_jsonl(file, source, mapping)
    raise TraceError(f"unknown trace format {suffix!r}; expected .csv or .jsonl", source=source)


def mapping_from_spec(spec: str) -> ColumnMapping:
    """Parse `arrival=ts,prompt=in,output=out[,unit=ms][,hashes=F,hash_tokens=N]` (units: s,
    ms, us, datetime; `hashes` names a field of prefix hashes, one per N prompt tokens)."""
    fields: dict[str, str] = {}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        if not sep or not value.strip():
            raise TraceError(f"--columns: {part!r} is not key=value")
        fields[key.strip()] = value.strip()
    unknown = set(fields) - {"arrival", "prompt", "output", "unit", "hashes", "hash_tokens"}
    missing = {"arrival", "prompt", "output"} - set(fields)
    if unknown or missing:
        raise TraceError(
            "--columns needs arrival=, prompt=, output= and optionally unit=, hashes= with "
            f"hash_tokens=; unknown {sorted(unknown)}, missing {sorted(missing)}"
        )
    hash_block_tokens = 0
    if "hashes" in fields:
        text = fields.get("hash_tokens", "")
        if not text.isdigit() or int(text) < 1:
            raise TraceError(
                f"--columns hashes={fields['hashes']} needs hash_tokens=N, the prompt tokens "
                "each hash stands for (e.g. hash_tokens=512)"
            )
        hash_block_tokens = int(text)
    try:
        unit = TimeUnit(fields.get("unit", "s"))
    except ValueError:
        raise TraceError(
            f"--columns unit={fields['unit']!r}; use one of s, ms, us, datetime"
        ) from None
    return ColumnMapping(
        fields["arrival"],
        fields["prompt"],
        fields["output"],
        unit,
        hash_ids=fields.get("hashes"),
        hash_block_tokens=hash_block_tokens,
    )


def _read_csv(file: Path, source: str, mapping: ColumnMapping | None) -> Trace:
    with file.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if not header:
            raise TraceError("empty file: expected a header row", source=source, line=1)
        header = [name.strip() for name in header]
        chosen = mapping or AZURE_LLM_MAPPING
        builder = TraceBuilder(source, chosen)
        builder.check_columns(header, line=1)
        for row in reader:
            line = reader.line_num
            if not row or all(not cell.strip() for cell in row):
                continue  # blank lines carry no request
            if len(row) != len(header):
                raise TraceError(
                    f"{len(row)} fields but the header has {len(header)}",
                    source=source,
                    line=line,
                )
            builder.add(dict(zip(header, row, strict=True)), line)
        return builder.build(file.name)


def _read_jsonl(file: Path, source: str, mapping: ColumnMapping | None) -> Trace:
    builder = TraceBuilder(source, mapping or MOONCAKE_MAPPING)
    with file.open(encoding="utf-8") as handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise TraceError(f"not valid JSON ({exc.msg})", source=source, line=line) from None
            if not isinstance(obj, dict):
                raise TraceError("expected one JSON object per line", source=source, line=line)
            builder.check_columns(obj.keys(), line)
            builder.add(obj, line)
    return builder.build(file.name)
