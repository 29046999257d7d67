"""The panel's preset menu, defaults and submitted settings come from the backend's settings
table (``addon.core.panel_fields``, read without Blender; the registered properties are checked
under bpy in checks_addon.py)."""

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from addon.core import panel_fields
from diffrec.protocol.settings import (
    DEFAULT_PRESET,
    FIELDS,
    ONE_PASS_ITERATIONS,
    PRESET_NOTES,
    PRESETS,
    Settings,
    parse_settings,
)

REPO = Path(__file__).parents[2]


def test_the_fields_stand_for_settings_that_exist():
    assert set(panel_fields.FIELD_SETTINGS.values()) <= set(FIELDS)


def test_the_preset_menu_is_the_backends_table_then_custom():
    assert panel_fields.preset_items() == [
        *((name.upper(), name.title(), PRESET_NOTES[name]) for name in PRESETS),
        ("CUSTOM", "Custom", "Your own settings")]


def test_the_defaults_are_the_settings_defaults_and_the_default_presets_sizes():
    mode, sizes = Settings().run.mode, PRESETS[DEFAULT_PRESET]
    assert {field: panel_fields.default(field) for field in panel_fields.FIELD_SETTINGS} == {
        "mode": mode, "preset": DEFAULT_PRESET.upper(), "iterations": sizes["iterations"],
        "batch": sizes["batch"], "train_resolution": sizes["train_res"],
        "texture_resolution": str(sizes["texture_res"]), "light_resolution": sizes["light_res"],
        "grid": sizes["grid"], "gpus": 1, "shading": "rasterized"}


def test_settings_defaults_are_the_default_presets_values():
    defaults = Settings().to_dict()
    assert {name: defaults[name] for name in PRESETS[DEFAULT_PRESET]} == PRESETS[DEFAULT_PRESET]
    assert Settings().run.preset == DEFAULT_PRESET and set(PRESET_NOTES) == set(PRESETS)


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("mode", ["materials", "reconstruct"])
def test_a_preset_fills_the_backends_values(preset, mode):
    size = parse_settings({"preset": preset, "mode": mode}).size
    assert panel_fields.preset_values(preset.upper(), mode) == {
        "iterations": size.iterations, "batch": size.batch,
        "train_resolution": size.train_res, "texture_resolution": str(size.texture_res),
        "light_resolution": size.light_res, "grid": size.grid}


def test_changing_the_mode_changes_the_presets_pass_length_not_the_artists():
    preview = {mode: parse_settings({"preset": "preview", "mode": mode}).size.iterations
               for mode in ("materials", "reconstruct")}
    assert preview["materials"] != preview["reconstruct"]
    assert panel_fields.iterations_for_mode("PREVIEW", "reconstruct",
                                            preview["materials"]) == preview["reconstruct"]
    assert panel_fields.iterations_for_mode("PREVIEW", "materials",
                                            preview["reconstruct"]) == preview["materials"]
    assert panel_fields.iterations_for_mode("PREVIEW", "reconstruct", 450) == 450
    assert panel_fields.iterations_for_mode("CUSTOM", "reconstruct", preview["materials"]) == \
        preview["materials"]


def test_the_estimate_counts_the_stopping_rule_the_server_will_run():
    for preset in (*PRESETS, "custom"):
        for mode in ("materials", "reconstruct"):
            window = parse_settings({"preset": preset, "mode": mode}).schedule.plateau_window
            assert panel_fields.plateau_window(preset.upper(), mode) == window, (preset, mode)


def _panel(**changes):
    values = {"mode": "reconstruct", "preset": "CUSTOM", "iterations": 120, "batch": 3,
              "train_resolution": 96, "texture_resolution": "512", "light_resolution": 64,
              "grid": 32, "gpus": 1, "light": "LEARN", "shading": "rasterized",
              "target_source": "RENDER", "triangles": 0}
    return SimpleNamespace(**{**values, **changes})


def test_the_submitted_settings_are_what_the_panel_shows():
    sent = panel_fields.optimize_settings(_panel(), has_envmap=True)
    settings = parse_settings(sent)
    run, size = settings.run, settings.size
    assert (run.mode, run.preset, size.iterations, size.batch) == ("reconstruct", "custom", 120, 3)
    assert (size.train_res, size.texture_res, size.light_res, size.grid) == (96, 512, 64, 32)
    assert settings.light.mode == "learn-from-envmap" and "ranks" not in sent


def test_the_grid_goes_with_reconstruct_and_the_gpus_when_several():
    sent = panel_fields.optimize_settings(_panel(mode="materials", gpus=2, light="KEEP"), False)
    assert "dmtet_grid" not in sent and sent["ranks"] == 2 and sent["light"] == "fixed"


def test_the_grid_is_sent_by_the_name_every_server_reads():
    sent = panel_fields.optimize_settings(_panel(grid=48), has_envmap=False)
    assert sent["dmtet_grid"] == 48 and "grid" not in sent  # protocol 5 servers know no grid
    assert parse_settings(sent).size.grid == 48


def test_the_shading_goes_with_materials_only():
    path_traced = _panel(mode="materials", shading="path-traced", light="KEEP")
    sent = panel_fields.optimize_settings(path_traced, False)
    assert parse_settings(sent).path_tracing.renderer == "path-traced"
    sent = panel_fields.optimize_settings(_panel(shading="path-traced"), True)
    assert "renderer" not in sent and parse_settings(sent).path_tracing.renderer == "rasterized"


@pytest.mark.parametrize(("light", "source", "has_envmap", "lamps", "expected"), [
    ("AUTO", "RENDER", True, 0, "fixed"),  # the targets are the world's renders: the true light
    ("AUTO", "RENDER", True, 2, "learn-from-envmap"),  # lamps light them too, and are not sent
    ("AUTO", "CAMERA_IMAGES", True, 0, "learn-from-envmap"),  # photos: learnt
    ("AUTO", "DATASET", False, 0, "learn"),
    ("LEARN", "RENDER", True, 0, "learn-from-envmap"),
    ("KEEP", "DATASET", True, 0, "fixed"),
    ("KEEP", "RENDER", True, 1, "fixed"),  # as asked (the panel's line warns)
])
def test_auto_keeps_the_world_for_renders_lit_by_it_alone_and_learns_otherwise(
        light, source, has_envmap, lamps, expected):
    sent = panel_fields.optimize_settings(_panel(light=light, target_source=source),
                                          has_envmap, lamps)
    assert parse_settings(sent).light.mode == expected


def test_the_triangle_budget_is_sent_when_set():
    assert "target_triangles" not in panel_fields.optimize_settings(_panel(), True)
    sent = panel_fields.optimize_settings(_panel(mode="refine", triangles=3300), True)
    assert parse_settings(sent).surface.target_triangles == 3300


def test_the_guides_preset_row_states_the_backends_values():
    guide = (REPO / "docs" / "guide.md").read_text()
    sizes = {name: [table[key] for key in ("iterations", "batch", "train_res", "texture_res",
                                            "light_res")] for name, table in PRESETS.items()}
    preview, standard, high = (sizes[name] for name in ("preview", "standard", "high"))
    assert ("*Preview* ({} iterations, batch {}, {} px images, {} px textures, {} px light"
            .format(*preview)) in guide
    assert (f"up to {ONE_PASS_ITERATIONS['preview']} iterations in *Materials* and *Refine*"
            in guide)
    assert "*Standard* ({}, {}, {}, {}, {})".format(*standard) in guide
    assert "*High* ({}, {}, {}, {}, {}:".format(*high) in guide


def test_the_guides_headless_progress_lines_are_the_servers_reports():
    """Headless, a progress line is printed per 5 % passed, of the reports the server sends
    every log_every iterations: a baked start's short pass prints less often."""
    guide = " ".join((REPO / "docs" / "guide.md").read_text().split())
    every, short = FIELDS["log_every"].default, FIELDS["given_start_iterations"].default
    assert (f"every `log_every` ({every}) iterations, so a long pass prints every 5 % and a "
            f"short one less often (a baked start's {short}-iteration pass every "
            f"{100 * every // short} %)") in guide


def _constant(path: str, name: str):
    """The literal value of the module-level ``name = ...`` in the repository's ``path``, read
    without importing it (the add-on's modules need bpy, the backend's torch)."""
    tree = ast.parse((REPO / path).read_text())
    (value,) = [node.value for node in tree.body if isinstance(node, ast.Assign)
                and any(getattr(target, "id", None) == name for target in node.targets)]
    return ast.literal_eval(value)


def test_the_estimate_costs_a_mip_step_as_the_backends_eta_does():
    assert _constant("addon/estimate.py", "MIP_STEP_COST") == \
        _constant("backend/diffrec/pipeline/mip_fit.py", "STEP_COST")
