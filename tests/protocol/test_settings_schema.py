"""The ``optimize`` settings schema (``diffrec.protocol.settings``): typed, coerced without
loss, checked, and refused over the wire with the field named (issue 13)."""

from __future__ import annotations

import typing

import pytest
from helpers.servers import smallest_materials_inputs

from diffrec.errors import UserError
from diffrec.pipeline.config import build_config
from diffrec.protocol import ServerError
from diffrec.protocol.settings import (
    ALIASES,
    FIELDS,
    HINTS,
    PLACES,
    PRESETS,
    RECORDS,
    SECTIONS,
    Settings,
    SettingsError,
    parse_settings,
    settings_schema,
)


def wrong_value(name: str):
    """A value of the wrong JSON type for setting ``name``."""
    hint = HINTS[name]
    if typing.get_origin(hint) is tuple:
        return "0.1 0.2"  # a string where a list belongs
    inner = [arg for arg in typing.get_args(hint) if arg is not type(None)] or [hint]
    return {int: 2.5, float: "fast", bool: 1, str: 7}[inner[0]]


@pytest.mark.parametrize("name", list(FIELDS))
def test_every_setting_refuses_a_value_of_the_wrong_type_naming_itself(name):
    with pytest.raises(SettingsError) as info:
        parse_settings({name: wrong_value(name)})
    assert info.value.field == name and str(info.value).startswith(f"{name}: ")


def test_the_server_answers_invalid_input_naming_each_wrongly_typed_field(server, connect):
    client = connect(server)
    unnamed = []
    for name in FIELDS:
        spec = {"task": "optimize", "settings": {"mode": "materials", name: wrong_value(name)}}
        with pytest.raises(ServerError) as info:
            client.submit(f"typed-{name.replace('_', '-')}", spec, smallest_materials_inputs())
        if info.value.code != "invalid_input" or f"setting {name}:" not in info.value.message:
            unnamed.append((name, info.value.code, info.value.message))
    assert unnamed == []
    spec = {"task": "optimize", "settings": {"mode": "materials", "iteratons": 3}}
    with pytest.raises(ServerError, match="iteratons: unknown setting") as info:
        client.submit("typed-unknown", spec, smallest_materials_inputs())
    assert info.value.code == "invalid_input"


def test_a_fixed_light_without_an_envmap_input_is_refused_at_submit(server, connect):
    spec = {"task": "optimize", "settings": {"mode": "materials", "light": "fixed"}}
    with pytest.raises(ServerError, match="envmap") as info:
        connect(server).submit("fixed-without-envmap", spec, smallest_materials_inputs())
    assert info.value.code == "invalid_input"


def test_coercion_is_lossless_only():
    settings = parse_settings({"iterations": "100", "batch": 3.0, "mesh_scale": "2",
                               "learning_rate": [1, "0.5"], "display": ["kd"]})
    assert (settings.size.iterations, settings.size.batch) == (100, 3)
    assert type(settings.size.iterations) is int and type(settings.surface.mesh_scale) is float
    assert settings.schedule.learning_rate == (1.0, 0.5) and settings.reporting.display == ("kd",)
    for bad in ({"batch": 2.5}, {"iterations": True}, {"iterations": "1e3"},
                {"mesh_scale": float("nan")}, {"validation": "yes"}, {"mode": None}):
        with pytest.raises(SettingsError):
            parse_settings(bad)


def test_values_are_checked_with_the_field_named():
    for values, field in (({"mode": "sculpt"}, "mode"), ({"iterations": 0}, "iterations"),
                          ({"kd_min": [0, 0]}, "kd_min"), ({"light_res": 100}, "light_res"),
                          ({"grid": 33}, "grid"), ({"display": ["x"]}, "display"),
                          ({"hash_table_log2": 30}, "hash_table_log2"),
                          ({"path_learning_rate": 0}, "path_learning_rate"),
                          ({"path_res": 5}, "path_res")):
        with pytest.raises(SettingsError) as info:
            parse_settings(values)
        assert info.value.field == field, values
    with pytest.raises(SettingsError, match="minimum must not exceed"):
        parse_settings({"kd_min": [0.5, 0.5, 0.5], "kd_max": [0.4, 1, 1]})


def test_a_preset_fills_what_the_values_leave_out():
    default = Settings()
    for name, values in PRESETS.items():
        settings = parse_settings({"preset": name, "iterations": 7})
        assert settings.size.iterations == 7, "given values win over the preset"
        for key, value in values.items():
            if key != "iterations":
                assert settings.to_dict()[key] == value, (name, key)
    assert parse_settings({}) == parse_settings({"preset": "standard"})
    assert parse_settings({}, apply_preset=False) == default
    assert default.replace(batch=2).size.batch == 2 and default.size.batch != 2


def test_the_schema_describes_every_field():
    schema = settings_schema()
    assert list(schema) == list(FIELDS)
    assert schema["iterations"]["type"] == "integer" and schema["iterations"]["minimum"] == 1
    assert schema["preview_res"]["type"] == "integer or null"
    assert schema["learning_rate"] == {"type": "list of number", "default": [0.03, 0.01],
                                       "section": "schedule", "help": "per pass (each positive)",
                                       "length": 2}
    assert schema["mode"]["choices"] == ["materials", "refine", "reconstruct"]


def test_every_setting_is_in_a_section_and_the_settings_stay_flat():
    assert {name: spec.metadata["section"] in SECTIONS for name, spec in FIELDS.items()} == {
        name: True for name in FIELDS}
    assert set(SECTIONS) == {spec.metadata["section"] for spec in FIELDS.values()}
    assert list(Settings().to_dict()) == list(FIELDS)  # no nesting on the wire or in files


def test_a_setting_is_read_from_its_section_and_its_flat_name_says_where():
    settings = parse_settings({"preset": "preview", "mode": "reconstruct", "light": "fixed"})
    flat = settings.to_dict()
    for name in [*FIELDS, *ALIASES]:
        section, attribute = PLACES[ALIASES.get(name, name)]
        assert getattr(getattr(settings, section), attribute) == flat[ALIASES.get(name, name)]
        if name in RECORDS:  # light, schedule: the flat name is the record's
            assert isinstance(getattr(settings, name), RECORDS[name])
            continue
        with pytest.raises(AttributeError) as raised:
            getattr(settings, name)
        assert str(raised.value) == (f"'Settings' object has no attribute {name!r}; read it "
                                     f"from its section: settings.{section}.{attribute}"), name
    assert not hasattr(settings, "batch") and settings.size.batch == PRESETS["preview"]["batch"]
    with pytest.raises(AttributeError, match=r"no attribute 'batches'$"):
        settings.batches  # noqa: B018 (not a setting: no section to name)


def test_the_command_line_turns_mistakes_into_user_errors_and_keeps_sources_apart():
    with pytest.raises(UserError, match="batch: must be a whole number"):
        build_config({"batch": 2.5})
    with pytest.raises(UserError, match="env_scale"):
        build_config({"env_scale": 0})
    config = build_config({"dataset": "scene", "iterations": 5}, {"device": "cpu"})
    assert config.sources.dataset == "scene" and config.settings.size.iterations == 5
    assert config.device == "cpu" and "dataset" not in config.settings.to_dict()


def test_the_protocol_document_lists_every_setting_as_the_schema_says():
    import json
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text()
    for name, entry in settings_schema().items():
        allowed = []
        if "choices" in entry:
            allowed.append(", ".join(f"`{choice}`" for choice in entry["choices"]))
        for key, sign in (("minimum", "≥"), ("maximum", "≤")):
            if key in entry:
                allowed.append(f"{sign} {entry[key]}")
        if "length" in entry:
            length = entry["length"]
            counts = " or ".join(map(str, length)) if isinstance(length, list) else length
            allowed.append(f"{counts} values")
        row = (f"| `{name}` | {entry['type']} | `{json.dumps(entry['default'])}` | "
               f"{'; '.join(allowed)} | {entry['help']} |")
        assert row in text, f"docs/protocol.md's settings table is out of date at {name}"
        section = entry["section"]
        start = text.index(f"**{section}**: {SECTIONS[section]}.")
        ends = [text.find(f"\n**{other}**: ", start + 1) for other in SECTIONS]
        end = min([at for at in ends if at > start] or [text.index("**`fit_texture`**")])
        assert row in text[start:end], f"docs/protocol.md lists {name} outside {section}"
