"""Position schemes and frequency allocations carry their knob dataclasses (scheme_knobs.py): defaults and checks,
what naming a scheme fills in, the paper's `mrope_section` split, capabilities read at their one site."""

import inspect
import itertools
import logging
import math
import re
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from conftest import position_sensitive_config
from transformers.utils import logging as hf_logging
from vision_sizes import IMAGE, PATCH_DIM, SIZES, VIDEO

from roformer_ext import RoFormerExtConfig, RoFormerExtVisionTextConfig, RoFormerExtVisionTextForCausalLM
from roformer_ext.axis_allocations import interleaved_allocation, mrope_interleaved_allocation, register_axis_allocation
from roformer_ext.configuration_roformer_ext import BUILTIN_ALLOCATIONS, BUILTIN_SCHEMES
from roformer_ext.position_schemes import register_position_scheme, rope_1d, scheme_knobs
from roformer_ext.positions import build_position_ids
from roformer_ext.registries import AXIS_ALLOCATIONS, POSITION_SCHEMES
from roformer_ext.scheme_knobs import (
    BOOL,
    POSITIVE,
    AxisAllocationKnobs,
    SchemeCapabilities,
    SchemeKnobs,
    SplitAllocationKnobs,
    allocation_knobs,
    allocation_knobs_class,
    knobs_from_signature,
    rotates_per_head,
    scheme_knobs_class,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"
BUILTIN_SCHEME_KNOBS = {name: scheme_knobs_class(name) for name in BUILTIN_SCHEMES}
BUILTIN_ALLOCATION_KNOBS = {name: allocation_knobs_class(name) for name in BUILTIN_ALLOCATIONS}


def knob_class(name: str, **class_vars):
    """A knob-less scheme's knob class, made as a registration makes it."""
    return knobs_from_signature(name, rope_1d, **class_vars)


@pytest.mark.parametrize("name", sorted(BUILTIN_SCHEME_KNOBS))
def test_builtin_scheme_registers_its_knob_class_with_the_functions_defaults(name):
    """The knob class is the registration's, and its fields are the function's keyword-only arguments with the same
    defaults (the function's defaults and the config's could otherwise drift apart)."""
    function = POSITION_SCHEMES.get(name)
    arguments = {p.name: p.default for p in inspect.signature(function).parameters.values() if p.kind is p.KEYWORD_ONLY}
    knobs = BUILTIN_SCHEME_KNOBS[name]
    defaults = {f.name: f.default for f in fields(knobs)}
    assert defaults == arguments
    assert set(knobs.checks) == set(defaults)  # every built-in knob is checked
    assert knobs.scheme == name


def test_allocation_classes_say_what_mrope_section_counts():
    assert all(knobs.allocation == name for name, knobs in BUILTIN_ALLOCATION_KNOBS.items())
    counts = {name: knobs.section for name, knobs in BUILTIN_ALLOCATION_KNOBS.items()}
    assert counts == {
        "interleaved": None, "split": None, "mmrope": None, "headwise": "heads", "sections": "pairs",
        "omnirope": "pairs", "mrope_interleaved": "pairs", "videorope": "pairs", "hope": "pairs",
    }  # fmt: skip
    assert [n for n, k in BUILTIN_ALLOCATION_KNOBS.items() if k.headwise] == ["headwise"]
    assert [n for n, k in BUILTIN_ALLOCATION_KNOBS.items() if k.axis_ladders] == ["omnirope"]


#: What a bare scheme name gets, as its paper runs it: (axes, axis_allocation, mrope_section for head_dim 32 = 16 pairs
#: and 8 heads; sections are scaled from the paper's size). Every built-in scheme has a row.
PAPER = {
    # Su's RoPE-Tie / 2D RoPE: rotary pairs alternate the axes; rope_1d and V2PE repeat one position on every axis
    "rope_1d": (3, "interleaved", None),
    "rope_2d_rows": (3, "interleaved", None),
    "rope_tie": (3, "interleaved", None),
    "rope_tie_v2": (3, "interleaved", None),
    "v2pe": (3, "interleaved", None),
    # Qwen2-VL / Qwen2.5-VL: contiguous sections [16, 24, 24] at head_dim 128 (Circle-RoPE builds on them)
    "mrope": (3, "sections", [4, 6, 6]),
    "qwen2_5_vl": (3, "sections", [4, 6, 6]),
    "circle_rope": (3, "sections", [4, 6, 6]),
    # Qwen3-VL's interleaved M-RoPE [24, 20, 20]; MRoPE-I and ILRoPE in the Multimodal-RoPEs reference
    "qwen3_vl": (3, "mrope_interleaved", [6, 5, 5]),
    "mrope_interleave": (3, "mrope_interleaved", [6, 5, 5]),
    "ilrope": (3, "mrope_interleaved", [6, 5, 5]),
    # MHRoPE: whole heads per axis, [2, 3, 3] of 8 heads (the Multimodal-RoPEs reference's default)
    "mhrope": (3, "headwise", [2, 3, 3]),
    # their own allocations, on Qwen2-VL's split
    "omnirope": (3, "omnirope", [4, 6, 6]),
    "videorope": (3, "videorope", [4, 6, 6]),
    "hope": (3, "hope", [4, 6, 6]),
    # Lumos-1's fixed 16-pair meta component; VRoPE's 4 axes on interleaved pairs
    "mmrope": (3, "mmrope", None),
    "vrope": (4, "interleaved", None),
}


def test_every_builtin_scheme_gets_its_papers_allocation_and_section_by_name():
    assert set(PAPER) == set(BUILTIN_SCHEMES)
    for name in sorted(BUILTIN_SCHEMES):
        rope = RoFormerExtVisionTextConfig(
            hidden_size=256, num_attention_heads=8, rope_parameters={"position_scheme": name}
        ).rope_parameters
        assert (rope["axes"], rope["axis_allocation"], rope.get("mrope_section")) == PAPER[name], name
    # a scheme without a pairing keeps the config's axes
    assert RoFormerExtConfig(rope_parameters={"position_scheme": "rope_tie"}).rope_parameters["axes"] == 1


@pytest.mark.parametrize("name", sorted(n for n, (_, _, section) in PAPER.items() if section))
def test_explicit_allocation_and_section_win_over_the_papers(name):
    heads = PAPER[name][1] == "headwise"
    given = [1, 1, 1] if heads else [2, 7, 7]
    sizes = dict(hidden_size=256, num_attention_heads=8)
    rope = RoFormerExtVisionTextConfig(**sizes, rope_parameters={"position_scheme": name, "mrope_section": given})
    assert rope.rope_parameters["mrope_section"] == given
    rope = RoFormerExtVisionTextConfig(
        **sizes, rope_parameters={"position_scheme": name, "axis_allocation": "interleaved"}
    ).rope_parameters
    assert rope["axis_allocation"] == "interleaved" and "mrope_section" not in rope
    # another allocation that counts pairs gets the paper's pairs; one that counts something else gets none
    other = "videorope" if name != "videorope" else "sections"
    rope = {"position_scheme": name, "axis_allocation": other}
    if heads:
        with pytest.raises(ValueError, match=r"'videorope' needs rope_parameters\['mrope_section'\]"):
            RoFormerExtVisionTextConfig(**sizes, rope_parameters=rope)
    else:
        assert (
            RoFormerExtVisionTextConfig(**sizes, rope_parameters=rope).rope_parameters["mrope_section"]
            == (PAPER[name][2])
        )


@pytest.mark.parametrize("heads, section", [(3, [1, 1, 1]), (4, [1, 2, 1]), (6, [2, 2, 2]), (12, [3, 5, 4])])
def test_mhrope_scales_its_head_split_to_the_head_count(heads, section):
    """MHRoPE's [2, 3, 3] of 8 heads, by largest remainders: every head reads an axis (no NoPE head by default)."""
    rope = RoFormerExtVisionTextConfig(
        hidden_size=16 * heads, num_attention_heads=heads, rope_parameters={"position_scheme": "mhrope"}
    ).rope_parameters
    assert rope["mrope_section"] == section and sum(section) == heads
    with pytest.raises(ValueError, match=r"attention heads per axis.*got None"):  # 2 heads cannot cover 3 axes
        RoFormerExtVisionTextConfig(
            hidden_size=32, num_attention_heads=2, rope_parameters={"position_scheme": "mhrope"}
        )


@pytest.mark.parametrize(
    "name", sorted(n for n, (axes, _, _) in PAPER.items() if axes != 3 or PAPER[n][1] != "interleaved")
)
def test_a_variant_refuses_other_axes_when_the_config_is_built(name):
    """Its function would refuse them in the first forward; the configuration says so first, with the fix."""
    axes = PAPER[name][0]
    other = 2 if axes != 2 else 3
    with pytest.raises(ValueError, match=rf"^Position scheme '{name}' places tokens on {axes} axes; .*= {other}\. Set"):
        RoFormerExtVisionTextConfig(rope_parameters={"position_scheme": name, "axes": other})
    assert BUILTIN_SCHEME_KNOBS[name].allowed_axes == (axes,)


@pytest.mark.parametrize(
    "rope, typo, meant",
    [
        ({"position_scheme": "mrope_interleave", "temporal_strde": 2.0}, "temporal_strde", "temporal_stride"),
        ({"position_scheme": "qwen3_vl", "mrope_sections": [6, 5, 5]}, "mrope_sections", "mrope_section"),
        ({"position_scheme": "circle_rope", "circle_raduis": 3.0}, "circle_raduis", "circle_radius"),
        ({"rope_type": "linear", "factor": 2.0, "axis_alocation": "split"}, "axis_alocation", "axis_allocation"),
        ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32, "beta_fats": 8}, "beta_fats",
         "beta_fast"),
    ],
)  # fmt: skip
def test_an_unknown_rope_key_warns_once_naming_the_nearest_known_key(rope, typo, meant, warnings_seen):
    """A typo'd key was ignored in silence and its default used; transformers' own models warn on unknown keys."""
    RoFormerExtVisionTextConfig(hidden_size=64, num_attention_heads=2, rope_parameters=rope)
    about = [record.getMessage() for record in warnings_seen.records if typo in record.getMessage()]
    assert len(about) == 1, about
    assert "unknown" in about[0] and f"did you mean {meant!r}?" in about[0].lower()


@pytest.fixture()
def warnings_seen(caplog):
    """transformers' warnings (ours, and its own if it repeated them) as caplog records."""
    hf_logging.enable_propagation()
    try:
        with caplog.at_level(logging.WARNING):
            yield caplog
    finally:
        hf_logging.disable_propagation()


def test_known_rope_keys_and_a_plugins_knobs_warn_nothing(registered, warnings_seen):
    def stepped(segments, axes, *, step_size=1.0):
        return rope_1d(segments, axes)

    register_position_scheme(registered(POSITION_SCHEMES, "test_stepped"))(stepped)
    every_knob = {
        name: field.default
        for knobs in BUILTIN_SCHEME_KNOBS.values()
        for name, field in ((f.name, f) for f in fields(knobs))
    }
    RoFormerExtVisionTextConfig(
        hidden_size=64,
        num_attention_heads=2,
        rope_parameters={
            "position_scheme": "test_stepped",
            "step_size": 2.0,
            "rope_theta": 500.0,
            "pair_layout": "half",
            "grape_share_across_heads": True,
            **every_knob,
        },
    )
    RoFormerExtConfig(
        rope_parameters={"rope_type": "yarn", "factor": 2.0, "beta_fast": 16, "original_max_position_embeddings": 768}
    )
    assert not [r.getMessage() for r in warnings_seen.records if "rope_parameters" in r.getMessage()]


POSITIVE_BAD = [0, -1.0, True, math.nan, math.inf, "2"]
#: Bad values for every built-in knob: the configuration refuses each (the one check; the scheme functions trust it).
BAD_VALUES = {
    "tokens_per_second": POSITIVE_BAD,
    "temporal_stride": POSITIVE_BAD,
    "visual_stride": POSITIVE_BAD,
    "spatial_reset": [1, "yes"],
    "temporal_scales": [[], (), 0.5, "0.5", [1.0, 0], [1.0, -2.0]],
    "visual_stride_tokens": [0, True, 2.0, 2.5, "4"],
    "position_scale": [[1.0, 1.0], "111", None, (1, 0, 1)],
    "circle_radius": [0, None, "2", "auto-0", "auto-x", "auto-", "autos", "automatic-2", "x-2", "auto-inf", "auto--1",
                      "AUTO-2", "xauto-2"],
    "circle_alpha": [-0.1, 1.01, 1.5, True, "0.5"],
    "circle_move_to_origin": ["yes", 1],
    "circle_dff_rate": [-0.5, 1.5, False],
    "circle_move_to_positive": [True, "1", math.inf, -0.5],
}  # fmt: skip
GOOD_VALUES = {"circle_radius": [3.0, "auto", "auto-2", "auto-0.5", "auto-2e-1"], "circle_alpha": [0, 0.0, 0.25, 1, 1.0],
               "circle_dff_rate": [0, 1], "circle_move_to_positive": [None, 0, 0.0, 0.5], "visual_stride_tokens": [None, 1],
               "temporal_scales": [None, (0.5,), [1, 2.5]]}  # fmt: skip


@pytest.mark.parametrize(("knob", "value"), [(k, v) for k, values in BAD_VALUES.items() for v in values])
def test_every_builtin_knob_refuses_a_bad_value_when_the_config_is_built(knob, value):
    schemes = [name for name, knobs in BUILTIN_SCHEME_KNOBS.items() if knob in knobs.checks]
    with pytest.raises(ValueError, match=rf"rope_parameters\['{knob}'\] must be"):
        RoFormerExtVisionTextConfig(rope_parameters={"position_scheme": schemes[0], knob: value})
    for name in schemes:  # the scheme's class alone too, naming the scheme
        with pytest.raises(ValueError, match=rf"^Position scheme '{name}': rope_parameters\['{knob}'\] must be"):
            BUILTIN_SCHEME_KNOBS[name].from_rope_parameters({knob: value})


def test_every_builtin_knob_is_listed_and_edge_values_are_taken():
    assert set(BAD_VALUES) == {k for c in BUILTIN_SCHEME_KNOBS.values() for k in c.checks}
    for knob, values in GOOD_VALUES.items():
        name = next(name for name, knobs in BUILTIN_SCHEME_KNOBS.items() if knob in knobs.checks)
        for value in values:
            assert getattr(BUILTIN_SCHEME_KNOBS[name](**{knob: value}), knob) == value
            RoFormerExtVisionTextConfig(rope_parameters={"position_scheme": name, knob: value})


def test_a_scheme_gets_its_knobs_as_given_else_their_defaults():
    given = scheme_knobs("hope", {"temporal_stride": 2.0, "axes": 3})
    assert given == {"temporal_stride": 2.0, "temporal_scales": None}
    assert scheme_knobs("rope_tie", {"temporal_stride": 2.0}) == {}


def test_the_docs_table_lists_every_builtin_knob_with_its_default():
    """docs/position-schemes.md's knob table is checked against the dataclasses (names and defaults)."""
    text = (DOCS / "position-schemes.md").read_text(encoding="utf-8")
    table = text[text.index("| scheme | knobs (default) |") :].split("\n\n")[0]
    rows = {}
    for line in table.splitlines()[2:]:
        scheme, knobs = (cell.strip() for cell in line.strip("|").split("|")[:2])
        rows[scheme.strip("`")] = knobs
    for name, knobs in BUILTIN_SCHEME_KNOBS.items():
        written = ", ".join(f"`{f.name}` ({f.default!r})" for f in fields(knobs)) or "none"
        assert rows[name] == written, name
    assert set(rows) == set(BUILTIN_SCHEME_KNOBS)


def test_the_docs_plugin_example_runs(registered):
    text = (DOCS / "position-schemes.md").read_text(encoding="utf-8")
    section = text[text.index("## Your own scheme") :]
    code = section[section.index("```python") + len("```python") : section.index("```", section.index("```python") + 3)]
    registered(POSITION_SCHEMES, "stepped")
    exec(compile(code, "position-schemes.md", "exec"), {})
    knobs = scheme_knobs_class("stepped")
    assert knobs.names() == ("step",) and not knobs.capabilities.video
    rope = RoFormerExtVisionTextConfig(rope_parameters={"position_scheme": "stepped"}).rope_parameters
    assert (rope["axes"], rope["axis_allocation"]) == (3, "interleaved")
    with pytest.raises(ValueError, match=r"rope_parameters\['step'\] must be a positive number"):
        RoFormerExtVisionTextConfig(rope_parameters={"position_scheme": "stepped", "step": 0})


# -- plugins ------------------------------------------------------------------------------------------------------


@pytest.fixture()
def registered():
    names = []

    def register(registry, name):
        names.append((registry, name))
        return name

    yield register
    for registry, name in names:
        registry.unregister(name)


def test_a_scheme_without_a_knob_class_gets_one_from_its_signature(registered):
    def with_knobs(segments, axes, *, b, a=2, c):
        return rope_1d(segments, axes)

    register_position_scheme(registered(POSITION_SCHEMES, "test_sig"))(with_knobs)
    knobs = scheme_knobs_class("test_sig")
    assert issubclass(knobs, SchemeKnobs) and knobs.scheme == "test_sig" and knobs.names() == ("b", "c", "a")
    assert [f.default for f in fields(knobs)] == [MISSING, MISSING, 2]  # required knobs first
    assert knobs(b=1, c=3).to_dict() == {"b": 1, "c": 3, "a": 2}
    assert knobs.from_rope_parameters({"b": 2, "c": 1, "other": 1}).to_dict() == {"b": 2, "c": 1, "a": 2}
    with pytest.raises(ValueError, match=r"'test_sig' needs rope_parameters\['b'\] \(a knob without a default\); add"):
        RoFormerExtVisionTextConfig(rope_parameters={"position_scheme": "test_sig", "c": 1})
    config = RoFormerExtVisionTextConfig(rope_parameters={"position_scheme": "test_sig", "b": 1, "c": 3})
    assert scheme_knobs("test_sig", config.rope_parameters) == {"b": 1, "c": 3, "a": 2}  # required ones passed too
    unsigned = knobs_from_signature("unsigned", dict)  # inspect finds no signature for a builtin type
    assert unsigned.names() == () and unsigned.scheme == "unsigned"


def test_a_knob_class_must_match_the_functions_arguments(registered):
    @dataclass(frozen=True)
    class OtherKnobs(SchemeKnobs):
        other: float = 1.0

    def scheme(segments, axes, *, step=1.0):
        return rope_1d(segments, axes)

    with pytest.raises(TypeError, match=r"fields \['other'\] but the function's keyword-only arguments are \['step'\]"):
        register_position_scheme("test_mismatch", knobs=OtherKnobs)(scheme)
    with pytest.raises(TypeError, match="'test_mismatch''s knobs must be a SchemeKnobs subclass"):
        register_position_scheme("test_mismatch", knobs=dict)(scheme)
    assert "test_mismatch" not in POSITION_SCHEMES.names()


def test_a_scheme_that_places_no_video_refuses_one_early(registered):
    @dataclass(frozen=True)
    class NoVideo(SchemeKnobs):
        capabilities: ClassVar[SchemeCapabilities] = SchemeCapabilities(video=False)

    register_position_scheme(registered(POSITION_SCHEMES, "test_no_video"), knobs=NoVideo)(rope_1d)
    config = RoFormerExtVisionTextConfig(**SIZES, rope_parameters={"position_scheme": "test_no_video"})
    ids, image_grid = torch.tensor([[5, IMAGE, 6, VIDEO, VIDEO, 7]]), torch.tensor([[1, 1, 1]])
    video_grid = torch.tensor([[2, 1, 1]])
    with pytest.raises(ValueError, match="'test_no_video' does not place videos"):
        build_position_ids(ids, config, image_grid, video_grid)
    with pytest.raises(ValueError, match="'test_no_video' does not place videos"):  # packed rows too
        build_position_ids(ids, config, image_grid, video_grid, cu_seq_lens=torch.tensor([0, 6]))
    images_only = torch.tensor([[5, IMAGE, 6]])
    positions, _ = build_position_ids(images_only, config, image_grid)
    assert positions[:, 0].tolist() == [[0, 1, 2]] * 3
    with_video = RoFormerExtVisionTextConfig(**SIZES, rope_parameters={"position_scheme": "rope_1d"})
    positions, _ = build_position_ids(ids, with_video, image_grid, video_grid)  # the same scheme, video allowed
    assert positions[:, 0].tolist() == [[0, 1, 2, 3, 4, 5]] * 3


@pytest.mark.parametrize("capability", ["cache", "packing"])
def test_a_scheme_without_cache_or_packing_is_refused_where_positions_are_built(capability, registered):
    @dataclass(frozen=True)
    class Limited(SchemeKnobs):
        capabilities: ClassVar[SchemeCapabilities] = SchemeCapabilities(**{capability: False})

    name = registered(POSITION_SCHEMES, f"test_no_{capability}")
    register_position_scheme(name, knobs=Limited)(rope_1d)
    config = position_sensitive_config(
        RoFormerExtVisionTextConfig, **SIZES, is_decoder=True, rope_parameters={"position_scheme": name}
    )
    model = RoFormerExtVisionTextForCausalLM(config).eval()
    ids = torch.tensor([[5, 6, IMAGE, 7]])
    pixels, grid = torch.randn(1, PATCH_DIM), torch.tensor([[1, 1, 1]])
    cu = torch.tensor([0, 4, 8], dtype=torch.int32)
    packed = dict(pixel_values=torch.cat([pixels, pixels]), image_grid_thw=torch.cat([grid, grid]), cu_seq_lens_q=cu)
    with torch.no_grad():
        if capability == "cache":
            with pytest.raises(ValueError, match=f"Cached generation is not defined for position_scheme '{name}'"):
                model.generate(ids, pixel_values=pixels, image_grid_thw=grid, max_new_tokens=2, do_sample=False)
            out = model.generate(
                ids, pixel_values=pixels, image_grid_thw=grid, max_new_tokens=1, do_sample=False, use_cache=False
            )
            assert out.shape == (1, 5)
            model(torch.cat([ids, ids], dim=1), **packed, cu_seq_lens_k=cu, use_cache=False)
        else:
            with pytest.raises(ValueError, match=f"'{name}' does not lay out packed .*: pad the batch instead"):
                model(torch.cat([ids, ids], dim=1), **packed, cu_seq_lens_k=cu)
            model.generate(ids, pixel_values=pixels, image_grid_thw=grid, max_new_tokens=1, do_sample=False)


def test_an_allocation_plugin_declares_its_section_check_and_headwise_flag(registered):
    register_axis_allocation(registered(AXIS_ALLOCATIONS, "test_banded"), section="pairs")(interleaved_allocation)
    assert allocation_knobs_class("test_banded").section == "pairs"
    rope = {"position_scheme": "rope_tie_v2", "axis_allocation": "test_banded"}
    with pytest.raises(ValueError, match="'test_banded' needs rope_parameters\\['mrope_section'\\]"):
        RoFormerExtVisionTextConfig(hidden_size=64, num_attention_heads=2, rope_parameters=rope)
    with pytest.raises(ValueError, match="must sum to head_dim // 2 = 16"):
        RoFormerExtVisionTextConfig(
            hidden_size=64, num_attention_heads=2, rope_parameters={**rope, "mrope_section": [1, 1, 1]}
        )
    # a scheme with a paper split fills it in for a sectioned plugin allocation too
    rope = {"position_scheme": "qwen2_5_vl", "axis_allocation": "test_banded"}
    config = RoFormerExtVisionTextConfig(hidden_size=64, num_attention_heads=2, rope_parameters=rope)
    assert config.rope_parameters["mrope_section"] == [4, 6, 6]

    @dataclass(frozen=True)
    class EvenPairs(AxisAllocationKnobs):
        allocation: ClassVar[str] = "test_even"

        def check(self, axes, num_pairs, num_heads):
            if num_pairs % 2:
                raise ValueError("test_even needs an even number of pairs")
            super().check(axes, num_pairs, num_heads)

    register_axis_allocation(registered(AXIS_ALLOCATIONS, "test_even"), knobs=EvenPairs)(interleaved_allocation)
    rope = {"position_scheme": "rope_tie_v2", "axis_allocation": "test_even"}
    RoFormerExtVisionTextConfig(hidden_size=64, num_attention_heads=2, rope_parameters=rope)  # 16 pairs
    with pytest.raises(ValueError, match="test_even needs an even number of pairs"):
        RoFormerExtVisionTextConfig(hidden_size=36, num_attention_heads=2, rope_parameters=rope)  # 9 pairs

    def per_head(num_pairs, axes, mrope_section, num_heads):
        return [[head % axes] * num_pairs for head in range(num_heads)]

    register_axis_allocation(registered(AXIS_ALLOCATIONS, "test_per_head"), headwise=True)(per_head)
    rope = {"position_scheme": "rope_tie_v2", "axis_allocation": "test_per_head"}
    with pytest.raises(ValueError, match="linear attention does not support"):
        RoFormerExtVisionTextConfig(
            hidden_size=64, num_attention_heads=2, attention_type="linear", rope_parameters=rope
        )


# --- the knob-class factories, called at test time (the built-ins are made at import, before a mutant is switched on)


def test_a_scheme_knob_class_carries_its_knobs_checks_and_class_variables():
    def scheme(segments, axes, *, stride=2.0, reset=True):
        raise AssertionError("not called")

    knobs = knobs_from_signature(
        "my_new_scheme",
        scheme,
        checks={"stride": POSITIVE, "reset": BOOL},
        default_axes=3,
        default_allocation="sections",
        mrope_section_ratio=(1, 2, 3),
    )
    assert issubclass(knobs, SchemeKnobs) and knobs.scheme == "my_new_scheme"
    assert knobs.__name__ == "MyNewSchemeKnobs" and knobs.__doc__ == "The knobs of position scheme 'my_new_scheme'."
    assert (knobs.default_axes, knobs.allowed_axes, knobs.default_allocation) == (3, (3,), "sections")
    assert knobs.mrope_section_ratio == (1, 2, 3) and knobs.checks == {"stride": POSITIVE, "reset": BOOL}
    assert knobs.names() == ("stride", "reset") and knobs().to_dict() == {"stride": 2.0, "reset": True}
    assert knobs(stride=0.5, reset=False).to_dict() == {"stride": 0.5, "reset": False}
    with pytest.raises(AttributeError):
        knobs().stride = 1.0  # frozen
    with pytest.raises(
        ValueError, match=r"'my_new_scheme': rope_parameters\['stride'\] must be a positive number; got 0"
    ):
        knobs(stride=0)
    with pytest.raises(ValueError, match=r"rope_parameters\['reset'\] must be True or False; got 1"):
        knobs(reset=1)
    # without knobs or axes: any axes; `allowed_axes` follows `default_axes` unless given
    plain = knob_class("plain")
    assert (plain.names(), plain.checks, plain().to_dict()) == ((), {}, {})
    assert (plain.default_axes, plain.allowed_axes, plain.default_allocation, plain.mrope_section_ratio) == (
        None, (1, 2, 3), None, None)  # fmt: skip
    assert knob_class("two", default_axes=2).allowed_axes == (2,)
    assert knob_class("given", default_axes=3, allowed_axes=(2, 3)).allowed_axes == (2, 3)
    assert knob_class("given", allowed_axes=(1,)).allowed_axes == (1,)


def test_an_allocation_knob_class_carries_its_flags():
    knobs = allocation_knobs("my_banded_split", section="heads", headwise=1, axis_ladders="yes")
    assert issubclass(knobs, AxisAllocationKnobs) and knobs.__name__ == "MyBandedSplitAllocationKnobs"
    assert (knobs.__module__, knobs.__doc__) == (
        "roformer_ext.scheme_knobs",
        "The knobs of axis allocation 'my_banded_split'.",
    )
    flags = lambda k: (k.section, k.headwise, k.axis_ladders)  # noqa: E731
    assert knobs.allocation == "my_banded_split" and flags(knobs) == ("heads", True, True)
    assert knobs().mrope_section is None and knobs(mrope_section=[1, 2]).mrope_section == [1, 2]
    plain = allocation_knobs("plain")
    assert plain.__name__ == "PlainAllocationKnobs" and flags(plain) == (None, False, False)
    assert [allocation_knobs("any", section=x).section for x in (None, "pairs", "heads")] == [None, "pairs", "heads"]
    with pytest.raises(ValueError, match="section counts None, 'pairs' or 'heads'; got 'rows'"):
        allocation_knobs("any", section="rows")
    with pytest.raises(TypeError, match="pass either knobs= or the flags section= / headwise= / axis_ladders="):
        register_axis_allocation("test_both", knobs=SplitAllocationKnobs, headwise=True)
    with pytest.raises(TypeError, match="'test_int''s knobs must be a AxisAllocationKnobs subclass"):
        register_axis_allocation("test_int", knobs=int)


def test_mrope_interleaved_allocation_strides_h_and_w_up_to_their_sections():
    # T,H,W,T,H,W,...: h on pairs 1, 4, 7 below 3 * 3 = 9, w on 2, 5, 8; every other pair t
    assert mrope_interleaved_allocation(10, 3, [4, 3, 3]) == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
    # h's section (2) ends first: pairs 1, 4; w's (4) reaches the last pair: 2, 5, 8, 11
    assert mrope_interleaved_allocation(12, 3, [6, 2, 4]) == [0, 1, 2, 0, 1, 2, 0, 0, 2, 0, 0, 2]


@pytest.mark.parametrize(
    "ratio, expected",
    [
        ((16, 24, 24), {2: None, 3: [1, 1, 1], 4: [1, 2, 1], 5: [1, 2, 2], 7: [2, 3, 2], 10: [2, 4, 4], 16: [4, 6, 6],
                        64: [16, 24, 24]}),
        ((24, 20, 20), {2: None, 3: [1, 1, 1], 4: [2, 1, 1], 5: [2, 2, 1], 7: [3, 2, 2], 8: [3, 3, 2], 16: [6, 5, 5],
                        64: [24, 20, 20]}),
        ((5, 3, 1), {4: [2, 1, 1], 6: [3, 2, 1], 7: [4, 2, 1], 8: [4, 2, 2], 10: [6, 3, 1], 16: [9, 5, 2]}),
        # raising an axis to its one pair overshoots: taken back from the largest, no pair rounded up
        ((1, 1, 8), {3: [1, 1, 1], 4: [1, 1, 2], 5: [1, 1, 3]}),
    ],
)  # fmt: skip
def test_default_mrope_section_rounds_the_largest_remainders_up(ratio, expected):
    """Written out by hand: e.g. (16, 24, 24) at 7 pairs is exactly 1.75, 2.625, 2.625: floors 1, 2, 2, and the one
    pair left goes to the largest remainder (t's .75)."""

    class Knobs(SchemeKnobs):
        mrope_section_ratio = ratio

    for num_pairs, section in expected.items():
        assert Knobs.default_mrope_section(num_pairs) == section, num_pairs
    for num_pairs in range(3, 200):
        section = Knobs.default_mrope_section(num_pairs)
        assert sum(section) == num_pairs and min(section) >= 1, (num_pairs, section)


def test_default_mrope_section_gives_no_pair_beyond_a_raised_minimum():
    """(A negative count of pairs to hand out once still handed them out: (1, 1, 8) at 5 pairs gave [1, 2, 2].)"""

    class Plugin(SchemeKnobs):
        pass

    overshoots = 0
    for ratio in itertools.product(range(1, 9), repeat=3):
        Plugin.mrope_section_ratio = ratio
        for num_pairs in range(3, 30):
            raised = [max(1, int(num_pairs * part / sum(ratio))) for part in ratio]
            section = Plugin.default_mrope_section(num_pairs)
            assert sum(section) == num_pairs and min(section) >= 1
            if sum(raised) > num_pairs:
                overshoots += 1
                assert all(got <= floor for got, floor in zip(section, raised)), (ratio, num_pairs, section)
    assert overshoots == 54  # counted: the cases where the old slice handed out pairs are among them


def test_an_allocation_check_at_its_edges():
    SplitAllocationKnobs().check(2, 8, 4)  # 8 pairs in two shares of 4
    with pytest.raises(ValueError, match="8 is not divisible by 3. Change the head dim or use 'interleaved'"):
        SplitAllocationKnobs().check(3, 8, 4)
    with pytest.raises(ValueError, match="^head_dim // 2 = 0 frequency pairs cannot cover 2 axes"):
        SplitAllocationKnobs().check(2, 0, 4)  # divisible, but no pair for the axes: the base check's message

    @dataclass(frozen=True)
    class HeadsSplit(SplitAllocationKnobs):  # a subclass whose section counts heads: the base check reads them
        section: ClassVar[str] = "heads"

    HeadsSplit(mrope_section=[2, 2]).check(2, 8, 4)  # the heads may be all used
    for section in ([4], [2, 3], None):  # one entry for two axes; 5 heads of 4; none
        with pytest.raises(
            ValueError,
            match=r"'split' needs .*with 2 entries, the attention heads per axis, summing to "
            rf"at most num_attention_heads = 4 .*got {re.escape(str(section))}",
        ):
            HeadsSplit(mrope_section=section).check(2, 8, 4)
    with pytest.raises(
        ValueError,
        match=r"with 3 entries summing to head_dim // 2 = 8.*a scheme with a published "
        r"split \(circle_rope, hope, ilrope, mrope, mrope_interleave, ",
    ):
        allocation_knobs("test_pairs", section="pairs")().check(3, 8, 4)
    AxisAllocationKnobs().check(3, 3, 4)  # one pair per axis is enough
    with pytest.raises(ValueError, match="head_dim // 2 = 2 frequency pairs cannot cover 3 axes"):
        AxisAllocationKnobs().check(3, 2, 4)


def test_what_rotates_per_head_and_unknown_names_without_knobs():
    assert rotates_per_head({"rope_type": "grape_m", "grape_share_across_heads": False}) is True
    assert rotates_per_head({"rope_type": "grape_m", "grape_share_across_heads": True}) is False
    assert rotates_per_head({"rope_type": "grape_m"}) is False  # the default shares
    assert rotates_per_head({"rope_type": "default", "grape_share_across_heads": False}) is False
    assert rotates_per_head({"axis_allocation": "headwise"}) is True and rotates_per_head({}) is False
    assert scheme_knobs_class("unknown") is SchemeKnobs and scheme_knobs_class(["qwen2_5_vl"]) is SchemeKnobs
    assert scheme_knobs_class("qwen2_5_vl").names() == ("tokens_per_second",)
    assert scheme_knobs_class("rope_tie").default_mrope_section(64) is None  # no paper split
    assert allocation_knobs_class("unknown") is AxisAllocationKnobs
    assert allocation_knobs_class(["headwise"]) is AxisAllocationKnobs


@pytest.mark.parametrize(("allowed", "named"), [((2, 3), "2 or 3"), ((1, 2, 4), "1, 2 or 4"), ((3,), "3")])
def test_a_scheme_refuses_other_axes_naming_the_ones_it_takes(allowed, named):
    with pytest.raises(
        ValueError,
        match=rf"'x' places tokens on {named} axes; .* Set rope_parameters\['axes'\] = "
        rf"{allowed[-1]}, or leave it out",
    ):
        knob_class("x", allowed_axes=allowed).check_axes(5)
    with pytest.raises(ValueError, match=r"rope_parameters\['axes'\] must be 1, 2 or 3 \(text, image, video\); got 4"):
        knob_class("x").check_axes(4)
