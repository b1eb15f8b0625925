"""``--params FILE``: a calibration file is used by the commands that evaluate (issue 15)."""
from __future__ import annotations

import json

import pytest
import yaml

from autotune.costmodel.params import default_params, load_params_file

SCEN = ["--model", "llama3-8b", "--cluster", "metro-2bldg", "--gpus", "64"]
CFG = ["--config", "tp=8,pp=1"]


def test_params_file_changes_evaluate_and_search(run_cli, tmp_path):
    f = tmp_path / "cal.yaml"
    f.write_text(yaml.safe_dump({"params": {"gemm_efficiency_max": default_params().gemm_efficiency_max / 2,
                                            "framework_efficiency_megatron": default_params().framework_efficiency_megatron}}))
    base = json.loads(run_cli("evaluate", *SCEN, *CFG, "--json").stdout)
    slow = run_cli("evaluate", *SCEN, *CFG, "--params", str(f), "--json")
    assert slow.returncode == 0, slow.stderr
    assert json.loads(slow.stdout)["breakdown"]["compute_s"] > 1.5 * base["breakdown"]["compute_s"]
    s0 = json.loads(run_cli("search", *SCEN, "--json").stdout)["best"]["iteration_time_s"]
    s1 = json.loads(run_cli("search", *SCEN, "--params", str(f), "--json").stdout)["best"]["iteration_time_s"]
    assert s1 > s0


@pytest.mark.parametrize("text, words", [
    ("params: {gemm_efficiency_max: abc}", "a finite number"),
    ("params: {no_such_param: 1.0}", "a parameter among"),
    ("params: {gemm_efficiency_max: .nan}", "a finite number"),
    ("- 1\n- 2\n", "a YAML mapping"),
    ("params: {isolated_gemm_knee_sharpness: 1.0e-7}", "a finite number >= 1"),
    ("params: {gemm_knee_sharpness: 0.5}", "a finite number >= 1"),
])
def test_bad_params_file_exits_2(run_cli, tmp_path, text, words):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    r = run_cli("evaluate", *SCEN, *CFG, "--params", str(f))
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_zero_where_a_time_is_divided_by_it_exits_2(run_cli, tmp_path):
    f = tmp_path / "zero.yaml"
    f.write_text("params: {gemm_efficiency_max: 0}")
    r = run_cli("evaluate", *SCEN, *CFG, "--params", str(f))
    assert r.returncode == 2 and "> 0" in r.stderr and "Traceback" not in r.stderr
    f.write_text("params: {nccl_overhead_scale: 0}")       # 0 means a library with no software cost
    assert run_cli("evaluate", *SCEN, *CFG, "--params", str(f)).returncode == 0


def test_a_calibration_from_before_the_megatron_factor_keeps_megatron_at_one(tmp_path):
    """A file that states the GEMM level but not framework_efficiency_megatron was fit with
    Megatron as the 1.0 reference (its GEMM level carries Megatron's overhead): loaded, Megatron
    stays at 1.0 instead of taking the shipped factor on top. A file without the GEMM level keeps
    the shipped factor."""
    from autotune.costmodel.params import load_params_file
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump({"params": {"gemm_efficiency_max": 0.72, "network_efficiency": 0.6}}))
    assert load_params_file(str(old)).framework_efficiency_megatron == 1.0
    part = tmp_path / "part.yaml"
    part.write_text(yaml.safe_dump({"params": {"network_efficiency": 0.7}}))
    assert load_params_file(str(part)).framework_efficiency_megatron == default_params().framework_efficiency_megatron
    new = tmp_path / "new.yaml"
    new.write_text(yaml.safe_dump({"params": {"gemm_efficiency_max": 0.85, "framework_efficiency_megatron": 0.8}}))
    assert load_params_file(str(new)).framework_efficiency_megatron == 0.8


def test_a_calibration_from_before_the_ampere_factor_keeps_ampere_at_one(tmp_path):
    """Until the sixteenth session Ampere was the reference (1.0) and Hopper fitted: a file that
    states Hopper's factor or the GEMM level but no Ampere factor keeps Ampere at 1.0."""
    f = tmp_path / "old.yaml"
    f.write_text(yaml.safe_dump({"params": {"gemm_efficiency_max": 0.854, "gpu_generation_efficiency_hopper": 0.913}}))
    p = load_params_file(str(f))
    assert p.gpu_generation_efficiency_ampere == 1.0 and p.gpu_generation_efficiency_hopper == 0.913
    g = tmp_path / "new.yaml"
    g.write_text(yaml.safe_dump({"params": {"gpu_generation_efficiency_ampere": 1.2}}))
    assert load_params_file(str(g)).gpu_generation_efficiency_ampere == 1.2


def test_a_calibration_with_one_gemm_curve_uses_it_for_the_isolated_split_too(tmp_path):
    """Until the eighteenth session one GEMM curve served both the in-step time and TP overlap's
    split: a file stating the in-step knee or half-intensity but not their isolated twins keeps
    that curve for both; a file stating neither keeps the shipped isolated curve."""
    f = tmp_path / "old.yaml"
    f.write_text(yaml.safe_dump({"params": {"gemm_knee_sharpness": 1.0, "gemm_half_intensity_ridge_ratio": 0.6}}))
    p = load_params_file(str(f))
    assert (p.isolated_gemm_knee_sharpness, p.isolated_gemm_half_intensity_ridge_ratio) == (1.0, 0.6)
    g = tmp_path / "new.yaml"
    g.write_text(yaml.safe_dump({"params": {"gemm_knee_sharpness": 1.0, "isolated_gemm_knee_sharpness": 3.0}}))
    q = load_params_file(str(g))
    assert q.isolated_gemm_knee_sharpness == 3.0
    assert q.isolated_gemm_half_intensity_ridge_ratio == default_params().isolated_gemm_half_intensity_ridge_ratio
    h = tmp_path / "other.yaml"
    h.write_text(yaml.safe_dump({"params": {"network_efficiency": 0.7}}))
    assert load_params_file(str(h)).isolated_gemm_knee_sharpness == default_params().isolated_gemm_knee_sharpness
