"""Reading trace files: the two known formats, a mapped generic format, and bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenpilot_lab.traces import mapping_from_spec, read_trace
from tokenpilot_lab.workload import TimeUnit, TraceError


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_reads_azure_csv(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "code.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.0000000,4808,10\n"
        "2024-05-10 00:00:00.2500000,110,27\n"
        "2024-05-10 00:00:02.0000000,7433,14\n",
    )
    trace = read_trace(path)
    assert trace.num_requests == 3
    assert [r.arrival_s for r in trace.requests] == pytest.approx([0.0, 0.25, 2.0])
    assert trace.requests[2].num_prompt_tokens == 7433
    assert trace.duration_s == pytest.approx(2.0)


def test_reads_mooncake_jsonl_ignoring_extra_fields(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "t.jsonl",
        '{"timestamp": 0, "input_length": 900, "output_length": 6, "hash_ids": [0, 1]}\n'
        "\n"
        '{"timestamp": 1500, "input_length": 40, "output_length": 4, "hash_ids": [2]}\n',
    )
    trace = read_trace(path)
    assert [(r.arrival_s, r.num_prompt_tokens) for r in trace.requests] == [(0.0, 900), (1.5, 40)]


def test_generic_files_with_a_mapping(tmp_path: Path) -> None:
    mapping = mapping_from_spec("arrival=when,prompt=in,output=out,unit=ms")
    assert mapping.time_unit is TimeUnit.milliseconds
    csv_path = write(tmp_path, "g.csv", "when,in,out,user\n0,5,2,a\n250,6,3,b\n")
    jsonl_path = write(tmp_path, "g.jsonl", '{"when": 0, "in": 5, "out": 2}\n')
    assert read_trace(csv_path, mapping).requests[1].arrival_s == 0.25
    assert read_trace(jsonl_path, mapping).num_requests == 1


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("e.csv", "", r"e.csv, line 1: empty file"),
        ("h.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", r"h.csv, line 1: no requests"),
        ("e.jsonl", "", r"e.jsonl, line 1: no requests"),
        (
            "m.csv",
            "TIMESTAMP,ContextTokens\n2024-05-10 00:00:00,5\n",
            r"m.csv, line 1: missing column\(s\) GeneratedTokens",
        ),
        (
            "n.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2024-05-10 00:00:00,5,1\n2024-05-10 00:00:01,5,-3\n",
            r"n.csv, line 3: GeneratedTokens is negative",
        ),
        (
            "u.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2024-05-10 00:00:05,5,1\n2024-05-10 00:00:01,5,3\n",
            r"u.csv, line 3: arrival time goes backwards",
        ),
        (
            "f.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:05,5\n",
            r"f.csv, line 2: 2 fields but the header has 3",
        ),
        (
            "j.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1,\n',
            r"j.jsonl, line 2: not valid JSON",
        ),
        (
            "k.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1}\n',
            r"k.jsonl, line 2: missing column\(s\) input_length, output_length",
        ),
        ("t.txt", "a,b\n", r"unknown trace format '.txt'"),
    ],
)
def test_bad_files_name_the_file_and_line(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(TraceError, match=message):
        read_trace(path)


def test_duplicate_timestamps_are_kept_and_reported(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "d.jsonl",
        '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
        '{"timestamp": 0, "input_length": 6, "output_length": 1}\n',
    )
    trace = read_trace(path)
    assert trace.num_requests == 2
    assert trace.notes == (
        "1 request(s) arrive at the same instant as the one before (first at line 2); "
        "kept as simultaneous",
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("arrival=t,prompt=p", r"missing \['output'\]"),
        ("arrival=t,prompt=p,output=o,speed=2", r"unknown \['speed'\]"),
        ("arrival=t,prompt=p,output=o,unit=h", "unit='h'; use one of"),
        ("arrival", "is not key=value"),
    ],
)
def test_bad_column_specs_say_what_is_expected(spec: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        mapping_from_spec(spec)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope\.csv: no such file"):
        read_trace(tmp_path / "nope.csv")


def test_mooncake_prefix_hashes_are_kept_through_windows_and_rates(tmp_path: Path) -> None:
    from tokenpilot_lab.workload import scale_rate, window

    path = write(
        tmp_path,
        "t.jsonl",
        '{"timestamp": 0, "input_length": 900, "output_length": 6, "hash_ids": [0, 1]}\n'
        '{"timestamp": 1000, "input_length": 1100, "output_length": 6, "hash_ids": [0, 1, 2]}\n'
        '{"timestamp": 2000, "input_length": 10, "output_length": 6}\n',
    )
    trace = read_trace(path)
    assert trace.hash_block_tokens == 512 and trace.has_prefix_hashes
    assert [r.hash_ids for r in trace.requests] == [(0, 1), (0, 1, 2), ()]
    later = window(scale_rate(trace, 2.0), 0.4, 1.0)
    assert [r.hash_ids for r in later.requests] == [(0, 1, 2)]
    assert later.hash_block_tokens == 512


def test_traces_without_prefix_hashes_share_nothing(tmp_path: Path) -> None:
    path = write(
        tmp_path, "code.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00,48,1\n"
    )
    trace = read_trace(path)
    assert not trace.has_prefix_hashes
    assert trace.requests[0].hash_ids == ()


def test_a_mapped_file_can_name_its_prefix_hashes(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "t,p,o,h\n0,40,2,7 8\n1,40,2,\n")
    trace = read_trace(
        path, mapping_from_spec("arrival=t,prompt=p,output=o,hashes=h,hash_tokens=32")
    )
    assert [r.hash_ids for r in trace.requests] == [(7, 8), ()]
    assert trace.hash_block_tokens == 32
    with pytest.raises(TraceError, match="hash_tokens=N"):
        mapping_from_spec("arrival=t,prompt=p,output=o,hashes=h")
    bad = write(tmp_path, "bad.csv", "t,p,o,h\n0,40,2,seven\n")
    with pytest.raises(TraceError, match="line 2: h must be a list of integers"):
        read_trace(bad, mapping_from_spec("arrival=t,prompt=p,output=o,hashes=h,hash_tokens=32"))
