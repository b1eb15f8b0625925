"""Issue 15: the torchtitan options autotune writes are accepted by torchtitan's own config parser.

torchtitan 0.3.0 (the version ``TORCHTITAN_VERSION`` names) is installed from the package registry
into a scratch virtual environment that sees this one's packages (torch included) through a .pth
file; its ``ConfigManager`` parses the options of the README scenario's best configuration and of
sampled legal configurations of a dense and an MoE model, and its pipeline code counts the virtual
stages they ask for."""
import json
import site
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.backends.torchtitan import TORCHTITAN_VERSION, torchtitan_args, torchtitan_notes
from autotune.space import SearchSpace, config_at
from autotune.specs.presets import build_scenario
from autotune.strategies.exhaustive import exhaustive_search

pytestmark = pytest.mark.slow
TOOL = Path(__file__).parent / "tools" / "torchtitan_parse.py"
CASES = (("llama3-405b", "campus-5bldg", "llama3", "llama3_debugmodel"),
         ("deepseek-v3", "region-pair", "deepseek_v3", "deepseek_v3_debugmodel"))


@pytest.fixture(scope="module")
def titan_python(tmp_path_factory) -> str:
    venv = tmp_path_factory.mktemp("torchtitan") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    here = next(p for p in site.getsitepackages() if Path(p, "torch").exists())
    target = next(venv.glob("lib/python3*/site-packages"))
    (target / "autotune_parent.pth").write_text(here + "\n")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--prefix", str(venv),
                        f"torchtitan=={TORCHTITAN_VERSION}"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return str(venv / "bin" / "python")


def parse(python, cases):
    r = subprocess.run([python, str(TOOL)], input=json.dumps(cases), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def check(scen, cfg, res):
    assert res["ok"], res.get("error")
    p, t = res["parallelism"], res["training"]
    assert (p["tensor_parallel_degree"], p["context_parallel_degree"], p["expert_parallel_degree"],
            p["pipeline_parallel_degree"]) == (cfg.tp, cfg.cp, cfg.ep, cfg.pp)
    assert p["data_parallel_shard_degree"] * p["data_parallel_replicate_degree"] == cfg.dp
    assert t["global_batch_size"] == scen.global_batch_seqs and t["seq_len"] == scen.seq_len
    assert res["ac"].startswith({"none": "NoAC", "selective": "SelectiveAC", "full": "FullAC"}[cfg.recompute]) \
        or cfg.recompute == "none"
    if cfg.pp > 1 and not torchtitan_notes(scen, cfg):
        assert res["virtual_stages"] == cfg.pp * cfg.pp_chunks


def test_readme_best_configuration_parses(titan_python):
    scen = build_scenario("llama3-405b", "campus-5bldg")
    best = exhaustive_search(SearchSpace(scen)).best_config
    [res] = parse(titan_python, [{"module": "llama3", "config": "llama3_debugmodel",
                                  "args": torchtitan_args(scen, best), "n_layers": scen.model.n_layers}])
    check(scen, best, res)


def test_sampled_configurations_parse(titan_python):
    cases, meta = [], []
    for model, cluster, module, config in CASES:
        scen = build_scenario(model, cluster)
        batch = SearchSpace(scen).sample(30, seed=1)
        for i in range(30):
            cfg = config_at(batch, i)
            cases.append({"module": module, "config": config, "args": torchtitan_args(scen, cfg),
                          "n_layers": scen.model.n_layers})
            meta.append((scen, cfg))
    results = parse(titan_python, cases)
    for (scen, cfg), res in zip(meta, results):
        check(scen, cfg, res)
