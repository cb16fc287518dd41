"""Format detection, parsing and every bad-input case of the file readers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from forecasting.readers import detect_format, read_events, read_series

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("azure_2023_code_head.csv", "azure"),
        ("burstgpt_synthetic.csv", "burstgpt"),
        ("mooncake_head.jsonl", "mooncake"),
        ("servegen_m-large_rate_head.csv", "servegen_rate"),
        ("azure_2024_coding_per_minute_head.csv", "minute_counts"),
        ("azure_2024_coding_10s_head.csv", "counts_10s"),
        ("plain_rate_synthetic.csv", "plain_rate"),
        ("per_minute_synthetic.csv", "minute_counts"),
    ],
)
def test_format_detected_from_header(name: str, kind: str) -> None:
    """Every supported format is recognised from its first line alone."""
    assert detect_format(DATA / name) == kind


def test_azure_trace_binned_with_seven_fractional_digits() -> None:
    """Azure timestamps (7 fractional digits) parse; rates are events per second."""
    events = read_events(DATA / "azure_2023_code_head.csv")
    assert events.times_s.size == 300
    assert np.all(np.diff(events.times_s) >= 0)
    s = read_series(DATA / "azure_2023_code_head.csv", 10)
    assert s.step_s == 10 and s.signal == "requests_per_s"
    # Full bins only: the total is at most the event count.
    assert 0 < s.values.sum() * 10 <= 300
    tokens = read_series(DATA / "azure_2023_code_head.csv", 10, "prompt_tokens_per_s")
    assert tokens.values.sum() > s.values.sum() * 100


def test_mooncake_ms_timestamps() -> None:
    """Mooncake stamps are milliseconds; shared stamps all count."""
    events = read_events(DATA / "mooncake_head.jsonl")
    assert events.times_s.size == 200
    assert events.times_s.max() < 200  # 200 requests in well under 200 s
    s = read_series(DATA / "mooncake_head.jsonl", 5)
    assert s.values.mean() > 1


def test_burstgpt_seconds_from_start() -> None:
    s = read_series(DATA / "burstgpt_synthetic.csv", 60, "output_tokens_per_s")
    assert len(s) == 29 and s.signal == "output_tokens_per_s"


def test_rate_files_keep_native_step() -> None:
    """ServeGen rates stay rates; count files become per-second rates."""
    sg = read_series(DATA / "servegen_m-large_rate_head.csv")
    assert sg.step_s == 600 and len(sg) == 300
    assert sg.values[0] == pytest.approx(212.78)
    pm = read_series(DATA / "azure_2024_coding_per_minute_head.csv")
    assert pm.step_s == 60 and pm.values[0] == pytest.approx(1424 / 60)
    c10 = read_series(DATA / "azure_2024_coding_10s_head.csv")
    assert c10.step_s == 10 and c10.values[0] == pytest.approx(14.6)
    # A bin labelled T covers [T - 5 s, T + 5 s).
    assert c10.start_s % 10 == 5
    plain = read_series(DATA / "plain_rate_synthetic.csv", 120)
    assert plain.step_s == 120 and len(plain) == 100


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_garbage_row_names_file_and_row(tmp_path: Path) -> None:
    """A non-numeric cell is an error naming the file and the data row."""
    p = _write(tmp_path, "bad.csv", "minute_start_s,requests\n0,5\n60,7\n120,lots\n")
    with pytest.raises(ValueError, match=r"bad\.csv: row 3: column 'requests'.*'lots'"):
        read_series(p)


def test_garbage_timestamp_names_row(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "az.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.9799600,10,2\nyesterday,1,1\n",
    )
    with pytest.raises(ValueError, match=r"az\.csv: row 2: .*yesterday"):
        read_series(p)


def test_bad_mooncake_line(tmp_path: Path) -> None:
    p = _write(
        tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 3, "output_length": 1}\n{oops\n'
    )
    with pytest.raises(ValueError, match=r"m\.jsonl: row 2"):
        read_series(p)


def test_empty_file_and_header_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty"):
        read_series(_write(tmp_path, "e.csv", ""))
    with pytest.raises(ValueError, match="no data rows"):
        read_series(_write(tmp_path, "h.csv", "timestamp_s,requests_per_s\n"))


def test_unknown_header_lists_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"u\.csv: unknown header.*minute_start_s,requests"):
        read_series(_write(tmp_path, "u.csv", "when,how_many\n1,2\n"))


def test_nan_gaps_duplicates_unsorted_zeros_in_rate_file(tmp_path: Path) -> None:
    """NaN is missing (interpolated), duplicates averaged, order fixed, zeros kept."""
    p = _write(
        tmp_path,
        "r.csv",
        "timestamp_s,requests_per_s\n"
        "120,NaN\n0,2\n60,4\n60,6\n240,0\n360,3\n",  # 180 and 300 missing
    )
    s = read_series(p)
    assert s.step_s == 60
    # 0:2, 60:(4+6)/2, 120: interp, 180: interp, 240: 0 (a real zero), 300: interp, 360: 3
    np.testing.assert_allclose(s.values, [2, 5, 10 / 3, 5 / 3, 0, 1.5, 3])


def test_missing_minute_in_count_file_is_zero(tmp_path: Path) -> None:
    p = _write(tmp_path, "c.csv", "minute_start_s,requests\n0,60\n120,120\n")
    np.testing.assert_allclose(read_series(p).values, [1, 0, 2])


def test_token_signal_on_rate_file_refused() -> None:
    with pytest.raises(ValueError, match="request rates only"):
        read_series(DATA / "servegen_m-large_rate_head.csv", signal="prompt_tokens_per_s")


def test_unknown_signal() -> None:
    with pytest.raises(ValueError, match="unknown signal"):
        read_series(DATA / "servegen_m-large_rate_head.csv", signal="vibes")


@pytest.mark.parametrize("cell", ["", "NaN", "nan", " NA "])
def test_empty_or_nan_count_cell_is_interpolated_not_zero(tmp_path: Path, cell: str) -> None:
    """An explicit empty/NaN count is a lost sample (interpolated), never 0 requests."""
    p = _write(tmp_path, "c.csv", f"minute_start_s,requests\n0,600\n60,{cell}\n120,600\n180,600\n")
    np.testing.assert_allclose(read_series(p).values, [10, 10, 10, 10])


def test_count_file_absent_row_is_zero_but_nan_row_is_interpolated(tmp_path: Path) -> None:
    """Absent row = zero requests (a known neighbour); NaN row = missing, interpolated."""
    p = _write(tmp_path, "c.csv", "minute_start_s,requests\n0,600\n60,NaN\n180,600\n240,600\n")
    # 0: 10/s, 60: lost -> between 10 and the absent (zero) 120 -> 5, 120: 0, 180: 10, 240: 10
    np.testing.assert_allclose(read_series(p).values, [10, 5, 0, 10, 10])


def test_ten_second_count_file_nan_cell_is_interpolated(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "t.csv",
        "Time,TIMESTAMP\n2024-05-10 00:00:00,100\n2024-05-10 00:00:10,\n"
        "2024-05-10 00:00:20,300\n2024-05-10 00:00:30,300\n",
    )
    np.testing.assert_allclose(read_series(p).values, [10, 20, 30, 30])


def test_negative_burstgpt_tokens_name_file_row_and_column(tmp_path: Path) -> None:
    """A negative token count is garbage, not something to net against a neighbour."""
    p = _write(
        tmp_path,
        "b.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "1,ChatGPT,10,500,510,Conversation log\n"
        "2,ChatGPT,10,-300,-290,Conversation log\n"
        "100,ChatGPT,10,5,15,Conversation log\n",
    )
    with pytest.raises(
        ValueError, match=r"b\.csv: row 2: column 'response tokens': negative value '-300'"
    ):
        read_series(p, 60, "output_tokens_per_s")
    with pytest.raises(ValueError, match=r"b\.csv: row 2: column 'response tokens'"):
        read_events(p)


def test_negative_azure_tokens_name_row(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "az.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.9799600,10,2\n2023-11-16 18:18:03.9799600,-1,1\n",
    )
    with pytest.raises(ValueError, match=r"az\.csv: row 2: column 'contexttokens': negative"):
        read_events(p)


@pytest.mark.parametrize(
    ("header", "rows", "column"),
    [
        ("minute_start_s,requests", "0,5\n60,-7\n120,3\n", "requests"),
        ("timestamp_s,requests_per_s", "0,1\n60,-0.5\n120,3\n", "requests_per_s"),
        ("window_start_s,total_rps", "0,1\n600,-2\n1200,3\n", "total_rps"),
        ("Time,TIMESTAMP", "2024-05-10 00:00:00,1\n2024-05-10 00:00:10,-4\n", "timestamp"),
    ],
)
def test_negative_count_or_rate_names_file_row_and_column(
    tmp_path: Path, header: str, rows: str, column: str
) -> None:
    p = _write(tmp_path, "n.csv", f"{header}\n{rows}")
    with pytest.raises(ValueError, match=rf"n\.csv: row 2: column '{column}': negative value"):
        read_series(p)


def test_an_absurd_rate_names_file_row_and_column(tmp_path: Path) -> None:
    """A value no fleet could serve (a unit error, a corrupted sample) is refused by row."""
    p = _write(tmp_path, "h.csv", "timestamp_s,requests_per_s\n0,1\n60,1e300\n120,3\n")
    with pytest.raises(ValueError, match=r"h\.csv: row 2: column 'requests_per_s'.*plausible"):
        read_series(p)


@pytest.mark.parametrize("field", ["timestamp", "input_length", "output_length"])
def test_mooncake_missing_field_names_row(tmp_path: Path, field: str) -> None:
    """A record without a required field is an error, not an all-zero token series."""
    full = {"timestamp": 1000, "input_length": 3, "output_length": 1}
    partial = {k: v for k, v in full.items() if k != field}
    p = _write(
        tmp_path,
        "m.jsonl",
        json.dumps({"timestamp": 0, "input_length": 3, "output_length": 1})
        + "\n"
        + json.dumps(partial)
        + "\n",
    )
    with pytest.raises(ValueError, match=rf"m\.jsonl: row 2: Mooncake record has no '{field}'"):
        read_events(p)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ('{"timestamp": 5, "input_length": -3, "output_length": 1}', "'input_length' is negative"),
        ('{"timestamp": 5, "input_length": 3, "output_length": "x"}', "'output_length' is not a"),
        ('{"timestamp": 5, "input_length": NaN, "output_length": 1}', "'input_length' is not fin"),
        ('{"timestamp": null, "input_length": 3, "output_length": 1}', "'timestamp' is not a"),
        ("[1, 2, 3]", "must be a JSON object"),
    ],
)
def test_mooncake_bad_field_names_row(tmp_path: Path, record: str, message: str) -> None:
    p = _write(
        tmp_path,
        "m.jsonl",
        '{"timestamp": 0, "input_length": 3, "output_length": 1}\n' + record + "\n",
    )
    with pytest.raises(ValueError, match=rf"m\.jsonl: row 2: .*{message}"):
        read_events(p)
