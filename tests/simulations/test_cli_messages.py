"""The library's parameter names in an error become the flags a person typed."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from prescaler.cli import build_parser
from simulations.cli_messages import REPLAY_FLAGS, WINDOW_FLAGS, in_flags


def _flags(command: str) -> set[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[command]
    return {opt for action in parser._actions for opt in action.option_strings}


@pytest.mark.parametrize(
    ("command", "names"),
    [("simulate", REPLAY_FLAGS), ("tune", REPLAY_FLAGS), ("stack", WINDOW_FLAGS)],
)
def test_every_mapped_name_becomes_a_flag_the_command_has(
    command: str, names: dict[str, str]
) -> None:
    """A message never tells a person to use a flag their command lacks."""
    assert set(names.values()) <= _flags(command)


def test_the_trace_end_message_names_the_flags() -> None:
    text = (
        "t.csv: window [0, 9) s runs past the trace end (5 s long); shorten duration_s or start_s"
    )
    assert in_flags(text).endswith("shorten --duration or --start")


@given(st.text(alphabet="_ ,;.adeinorstu", max_size=40))
def test_text_without_a_name_is_left_as_it_is(text: str) -> None:
    """Only whole names are replaced: other words, and names inside longer
    words (``my_start_s_file``), are not."""
    assume(not any(name in text for name in REPLAY_FLAGS))
    assert in_flags(text) == text
    assert in_flags(f"my_start_s_file {text}") == f"my_start_s_file {text}"
