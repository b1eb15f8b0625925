import pytest

from autotune.errors import UserInputError
from autotune.specs import build_scenario, load_preset, preset_names

REQUIRED = {
    "models": ["gpt3-175b", "llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b", "llama4-scout",
               "llama4-maverick", "deepseek-v3"],
    "hardware": ["a100-80gb", "h100-sxm", "h800", "h200", "b200", "gb200-nvl72"],
    "clusters": ["single-building", "llama3-24k", "campus-5bldg", "metro-2bldg", "region-pair"],
}


@pytest.mark.parametrize("kind", list(REQUIRED))
def test_required_presets_load_and_document_a_source(kind):
    assert set(REQUIRED[kind]) <= set(preset_names(kind))
    for name in REQUIRED[kind]:
        spec = load_preset(kind, name)
        assert spec.source, f"{kind}/{name} has no source"


def test_parameter_counts_match_published_sizes():
    # totals in billions from the model cards; DeepSeek's MLA is approximated (~1% off)
    expected = {"llama3-8b": 8.03, "llama3-70b": 70.6, "llama3-405b": 405.8, "mixtral-8x7b": 46.7,
                "llama4-scout": 107.8, "llama4-maverick": 400.7, "deepseek-v3": 671.0, "gpt3-175b": 175.0}
    for name, billions in expected.items():
        got = load_preset("models", name).total_params / 1e9
        assert got == pytest.approx(billions, rel=0.02), name
    assert load_preset("models", "llama4-maverick").active_params / 1e9 == pytest.approx(17.2, rel=0.03)


def test_dotted_overrides_create_new_specs():
    base = build_scenario("llama3-8b", "campus-5bldg")
    s = build_scenario("llama3-8b", "campus-5bldg", overrides=["cluster.cross_building.loss_rate=1e-5",
                                                               "cluster.buildings.2.gpu=h200",
                                                               "workload.precision=fp8"])
    assert s.cluster.cross_building.loss_rate == 1e-5
    assert s.cluster.buildings[2].gpu.name == "h200"
    assert base.cluster.cross_building.loss_rate == 1e-6     # presets untouched
    assert s.precision == "fp8"


def test_scenario_file(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("model: {preset: llama3-70b, n_layers: 40}\ncluster: metro-2bldg\nworkload: {global_batch_seqs: 512}\n")
    s = build_scenario(scenario_file=f)
    assert s.model.n_layers == 40 and s.global_batch_seqs == 512 and s.cluster.n_buildings == 2


@pytest.mark.parametrize("kwargs, field", [
    ({"model": "llama9", "cluster": "campus-5bldg"}, "model"),
    ({"model": "llama3-8b", "cluster": "moon"}, "cluster"),
    ({"model": "llama3-8b", "cluster": "campus-5bldg", "overrides": ["model.hidden=-4"]}, "model.hidden"),
    ({"model": "llama3-8b", "cluster": "campus-5bldg", "overrides": ["model.hiden=4"]}, "model.hiden"),
    ({"model": "llama3-8b", "cluster": "campus-5bldg", "overrides": ["cluster.cross_building.oversubscription=0.5"]},
     "cluster.cross_building.oversubscription"),
    ({"model": "llama3-8b", "cluster": "campus-5bldg", "gpus": 1001}, "gpus"),
    ({"model": "llama3-8b", "cluster": "campus-5bldg", "overrides": ["nonsense"]}, "--set"),
    ({"model": "llama3-8b", "cluster": "campus-5bldg", "precision": "fp8",
      "overrides": ["cluster.buildings.0.gpu=a100-80gb"]}, "workload.precision"),
])
def test_bad_input_names_the_field(kwargs, field):
    with pytest.raises(UserInputError) as ei:
        build_scenario(**kwargs)
    msg = str(ei.value)
    assert field in msg and "\n" not in msg


def test_bad_scenario_files(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    for f in (empty, binary, tmp_path / "missing.yaml"):
        with pytest.raises(UserInputError) as ei:
            build_scenario(scenario_file=f)
        assert "--scenario" in str(ei.value)


def test_gpu_presets_hold_the_usable_share_of_their_nominal_hbm():
    """hardware.yaml's hbm_bytes follow constants.HBM_USABLE_GIB_PER_NOMINAL_GB (0.989 GiB per
    nominal GB: PyTorch's total capacity of an 80 GB H100 is 79.11 GiB), not the decimal size."""
    from autotune.costmodel.constants import hbm_bytes_of_nominal_gb
    from autotune.specs.presets import load_preset
    for gpu, nominal_gb in (("a100-80gb", 80), ("h100-sxm", 80), ("h800", 80), ("h200", 141), ("b200", 180),
                            ("gb200-nvl72", 186)):
        assert abs(load_preset("hardware", gpu).hbm_bytes / hbm_bytes_of_nominal_gb(nominal_gb) - 1) < 2e-4, gpu


@pytest.mark.parametrize("text, field, allowed", [
    ("tp=8,overlap_dp=true", "config.overlap_dp", "0 (off) or 1 (on)"),
    ("tp=8,tp=4", "config.tp", "each field once (already tp=8)"),
    ("tp=8,,pp=2", "--config", "none empty"),
    ("tp=8,pp=2,", "--config", "none empty"),
])
def test_inline_config_mistakes_name_field_and_rule(text, field, allowed):
    from autotune.configparse import parse_config_text, make_config
    with pytest.raises(UserInputError) as e:
        make_config(parse_config_text(text), 64)
    assert e.value.field == field and allowed in e.value.allowed


def test_a_preset_replacing_a_scenario_files_section_is_said(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-70b\ncluster: metro-2bldg\n")
    assert build_scenario(model="llama3-8b", scenario_file=str(f)).model.name == "llama3-8b"
    assert "--model llama3-8b replaces the model section" in capsys.readouterr().err
    build_scenario(model="llama3-70b", scenario_file=str(f))
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("sets, field, allowed", [
    (["cluster.buildings.0.gpu=nope"], "cluster.buildings.0.gpu", "one of a100-80gb"),
    (["cluster.buildings.0.gpu=a100-80gb", "workload.precision=fp8"], "workload.precision", "has no fp8"),
    (["model=llama3-70b"], "--set model", "--model llama3-70b"),
    (["model.n_layers=010", "model.n_layers=true"], "--set model.n_layers", "true/false are not numbers"),
])
def test_set_mistakes_say_field_and_rule_once(sets, field, allowed):
    with pytest.raises(UserInputError) as e:
        build_scenario(model="llama3-8b", cluster="campus-5bldg", overrides=sets)
    assert e.value.field == field and allowed in e.value.allowed and "got" not in e.value.allowed, str(e.value)


def test_set_reads_decimal_integers_as_written():
    assert build_scenario(model="llama3-8b", cluster="campus-5bldg", overrides=["model.n_layers=010"]).model.n_layers == 10


def test_network_lines_mark_the_tiers_the_model_does_not_use():
    """The header lists every tier the cluster declares, and says which one no group crosses: with
    one building neither building-spanning tier; within one region cross_region; across regions
    cross_building (scenario_consts reads ClusterSpec.inter_building_tier only); cross_zone where
    a building's GPUs fit in one zone."""
    metro = load_preset("clusters", "metro-2bldg")
    pair = load_preset("clusters", "region-pair")
    one = metro.model_copy(update={"buildings": metro.buildings[:1], "cross_region": metro.cross_building})
    lines = {ln.split(":")[0]: ln for ln in one.network_lines()}
    assert lines["cross_building"].endswith("(not used: one building)")
    assert lines["cross_region"].endswith("(not used: one building)")
    assert "not used" not in lines["scale_out"]
    both = metro.model_copy(update={"cross_region": pair.cross_region})
    lines = {ln.split(":")[0]: ln for ln in both.network_lines()}
    assert "not used" not in lines["cross_building"] and lines["cross_region"].endswith("(not used: one region)")
    spans = pair.model_copy(update={"cross_building": metro.cross_building})
    lines = {ln.split(":")[0]: ln for ln in spans.network_lines()}
    assert "not used" not in lines["cross_region"] and "not used: the buildings span regions" in lines["cross_building"]
    zoned = load_preset("clusters", "llama3-24k")            # zones of 3,072 GPUs in a 24,576-GPU building
    assert zoned.cross_zone is not None and zoned.zone_gpus < zoned.buildings[0].gpus
    assert not any("not used" in ln for ln in zoned.network_lines())
    small = zoned.with_total_gpus(zoned.zone_gpus)
    assert [ln for ln in small.network_lines() if "not used" in ln] == [
        ln for ln in small.network_lines() if ln.startswith("cross_zone")]
    assert small.network_lines()[2].endswith("(not used: a building's GPUs fit in one zone)")
