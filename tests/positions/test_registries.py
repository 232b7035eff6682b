"""The registries: the configuration module registers every built-in; names are checked against them."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from transformers.dynamic_module_utils import get_relative_import_files

import roformer_ext  # noqa: F401  (registers every built-in)
from roformer_ext import RoFormerExtConfig, RoFormerExtVisionTextConfig
from roformer_ext.configuration_roformer_ext import BUILTIN_ALLOCATIONS, BUILTIN_ENCODINGS, BUILTIN_SCHEMES
from roformer_ext.registries import AXIS_ALLOCATIONS, ROTARY_KINDS, Registry


def test_the_configuration_alone_registers_every_builtin():
    """In fresh processes: the configuration module alone registers what the package registers."""
    code = (
        "import {module}\n"
        "from roformer_ext.registries import AXIS_ALLOCATIONS, POSITION_ENCODINGS, POSITION_SCHEMES, ROTARY_KINDS\n"
        "print([r.registered() for r in (POSITION_ENCODINGS, ROTARY_KINDS, POSITION_SCHEMES, AXIS_ALLOCATIONS)])\n"
    )
    seen = []
    for module in ("roformer_ext.configuration_roformer_ext", "roformer_ext"):
        result = subprocess.run([sys.executable, "-c", code.format(module=module)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        seen.append(result.stdout)
    assert seen[0] == seen[1] and "'shaw'" in seen[0] and "'circle_rope'" in seen[0] and "'headwise'" in seen[0]


def test_configuration_loads_from_the_files_remote_code_copies(tmp_path):
    """As remote code loads it: its file and the siblings transformers lists, flat, with no modeling file."""
    package = tmp_path / "config_only"
    package.mkdir()
    (package / "__init__.py").write_text("")
    source = Path(roformer_ext.__file__).parent / "configuration_roformer_ext.py"
    for path in [source, *map(Path, get_relative_import_files(str(source)))]:
        shutil.copy(path, package / path.name)
    assert not [path.name for path in package.iterdir() if path.name.startswith("modeling_")]
    code = (
        "from config_only.configuration_roformer_ext import RoFormerExtConfig\n"
        "RoFormerExtConfig(position_encoding='t5_bias', hidden_size=64, num_attention_heads=2, rope_parameters={\n"
        "    'position_scheme': 'mrope', 'axes': 3, 'axis_allocation': 'sections', 'mrope_section': [8, 4, 4]})\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_user_names_are_accepted_and_removed():
    registry = Registry("thing", "register_thing", ("a",))
    assert registry.names() == ("a",) and registry.registered() == ()
    registry.register("b", object)
    assert registry.names() == ("a", "b") and registry.registered() == ("b",)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("b", object, overwrite=False)
    registry.unregister("b")
    with pytest.raises(ValueError, match=r"Unknown thing 'b'\. Registered choices: 'a'\. .*register_thing\(name\)"):
        registry.get("b")
    with pytest.raises(ValueError, match="Unknown thing 3"):
        registry.check(3)


def test_top_level_exports_the_public_api_only():
    """Every plugin kind's registration functions are exported; the position code's internals are not."""
    exported = set(roformer_ext.__all__)
    for kind in ("axis_allocation", "position_scheme", "position_encoding", "rotary_embedding"):
        assert f"register_{kind}" in exported and callable(getattr(roformer_ext, f"register_{kind}"))
    roformer_ext.register_axis_allocation("test_first_axis")(lambda num_pairs, axes, mrope_section: [0] * num_pairs)
    try:
        assert "registered_axis_allocations" in exported
        assert "test_first_axis" in roformer_ext.registered_axis_allocations()
    finally:
        AXIS_ALLOCATIONS.unregister("test_first_axis")
    assert not exported & {"apply_rotary", "build_position_ids"}
    assert all(hasattr(roformer_ext, name) for name in exported)
    from roformer_ext.positions import build_position_ids  # noqa: F401  (where the internals stay)
    from roformer_ext.rope import apply_rotary  # noqa: F401


@pytest.mark.parametrize(
    "key, value", [("grape_log_freq_scale", 0), ("grape_learnable_freq", "yes"), ("grape_share_across_heads", 1)]
)
def test_grape_hook_checks_grape_keys(key, value):
    """transformers calls `_validate_<rope_type>_rope_parameters` for GRAPE-M; ours checks GRAPE's own keys."""
    config = RoFormerExtConfig(hidden_size=32, num_attention_heads=2, rope_parameters={"rope_type": "grape_m"})
    with pytest.raises(ValueError, match=key):
        config._validate_grape_m_rope_parameters({**config.rope_parameters, key: value})
    with pytest.raises(ValueError, match=key):
        RoFormerExtConfig(hidden_size=32, num_attention_heads=2, rope_parameters={"rope_type": "grape_m", key: value})


def test_a_filled_in_mrope_section_is_saved(tmp_path):
    rope = {"position_scheme": "qwen3_vl"}
    RoFormerExtVisionTextConfig(hidden_size=64, num_attention_heads=2, rope_parameters=rope).save_pretrained(tmp_path)
    assert RoFormerExtVisionTextConfig.from_pretrained(tmp_path).rope_parameters["mrope_section"] == [6, 5, 5]


def test_docstring_and_docs_list_every_builtin_name():
    """The configuration's docstring is written from the registries; the docs' tables are checked against them."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    encodings, schemes = (
        (docs / f"position-{kind}.md").read_text(encoding="utf-8") for kind in ("encodings", "schemes")
    )
    for names, table in [
        (BUILTIN_ENCODINGS, encodings),
        (BUILTIN_SCHEMES, schemes),
        (BUILTIN_ALLOCATIONS, schemes),
        (ROTARY_KINDS.builtin, None),
    ]:
        for name in names:
            assert f'"{name}"' in RoFormerExtConfig.__doc__, name
            assert table is None or f"`{name}`" in table or f'`"{name}"`' in table, name
    assert "<<" not in RoFormerExtConfig.__doc__
