"""CLI-wide behaviour: a bad option is reported by the subcommand's own parser."""

from __future__ import annotations

import pytest

from ragjudge.cli import main


@pytest.mark.parametrize("command", ["evaluate", "fuse"])
def test_bad_option_shows_the_subcommand_usage(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "a", "b", "--no-such-option"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"usage: ragjudge {command}" in err
    assert f"ragjudge {command}: error: unrecognized arguments: --no-such-option" in err


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "usage: ragjudge" in capsys.readouterr().err
