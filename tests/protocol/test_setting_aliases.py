"""Settings read by another name (``settings.ALIASES``): ``dmtet_grid``, nvdiffrec's and protocol
5's name of the grid, is read as ``grid``, which both isosurfaces take; what is written has
the own name."""

from __future__ import annotations

import dataclasses

import pytest

from diffrec.protocol.settings import (
    ALIASES,
    FIELDS,
    PRESETS,
    Settings,
    SettingsError,
    parse_settings,
)


def test_the_grid_is_read_by_its_old_name_and_written_by_its_own():
    old, own = parse_settings({"dmtet_grid": 96}), parse_settings({"grid": 96})
    assert old == own and old.size.grid == 96 != Settings().size.grid
    assert "grid" in old.to_dict() and "dmtet_grid" not in old.to_dict()
    assert Settings(dmtet_grid=40).size.grid == 40
    assert dataclasses.replace(Settings(), dmtet_grid=40).size.grid == 40
    assert Settings().replace(dmtet_grid=40).size.grid == 40


def test_an_alias_is_checked_as_its_setting_and_wins_over_the_preset():
    with pytest.raises(SettingsError) as info:
        parse_settings({"dmtet_grid": 33})
    assert info.value.field == "grid" and "even" in str(info.value)
    high = parse_settings({"preset": "high", "dmtet_grid": 32})
    assert high.size.grid == 32 != PRESETS["high"]["grid"]


def test_both_names_agree_or_the_settings_are_refused():
    assert parse_settings({"grid": 48, "dmtet_grid": 48}).size.grid == 48
    with pytest.raises(SettingsError, match="also as dmtet_grid") as info:
        parse_settings({"grid": 48, "dmtet_grid": 64})
    assert info.value.field == "grid"


def test_aliases_name_settings_and_are_not_settings_themselves():
    assert set(ALIASES.values()) <= set(FIELDS) and not set(ALIASES) & set(FIELDS)
