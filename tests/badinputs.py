"""A seeded generator of bad inputs to every command (issue 17): command-line values, ``--set``
overrides, scenario and configuration files, storage and tracking URIs, paths and backend options.

Each case is a command line (``{in}`` stands for the folder its input files are written to,
``{work}`` for the empty working folder it runs in) and the files it reads. Every case is wrong by
construction: the tool must answer each with one line on stderr, exit 2, and nothing written.
``cases()`` returns them all in a fixed order, deduplicated."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import yaml

SCEN = ["--model", "llama3-8b", "--cluster", "metro-2bldg"]
GOOD_CONFIG = "tp=8,pp=2,cp=2,placement=dp_out,dp_flavour=ddp,collective=ring,overlap_dp=0,recompute=full"
STUDY = ["study", *SCEN, "--gpus", "8", "--trials", "2", "--no-tracking", "--storage", "sqlite:///{work}/s.db"]


@dataclass(frozen=True)
class Case:
    kind: str
    argv: tuple
    files: tuple = field(default=())          # (name, bytes) pairs written under {in}
    codes: tuple = (2,)                       # 3: a storage file that exists but is not a healthy database

    @property
    def key(self) -> tuple:
        return (self.argv, self.files)


# ----------------------------------------------------------------------------- values
NOT_A_NUMBER = ["abc", "", " ", "٨", "１", "1_000", "0x10", "--", "None", "1,5", "1 2", "+", "e5", "½", "1.2.3",
                "\x00", "9" * 400]
BAD_INT = NOT_A_NUMBER + ["-1", "-7", "1.5", "1e3", "nan", "inf", "-inf", str(2**63), str(10**30), str(-2**63)]
BAD_FLOAT = NOT_A_NUMBER + ["-1", "nan", "inf", "-inf", "1e999", "-1e999"]
INT_OPTIONS = [  # (command prefix, option, extra bad values for this option)
    (["space", *SCEN], "--gpus", ["0", "3", "5"]),
    (["space", *SCEN], "--global-batch", ["0"]),
    (["space", *SCEN], "--seq-len", ["0"]),
    (["search", *SCEN], "--top", ["0", "100000"]),
    (["bench"], "--rows", ["0", str(10**9)]),
    (["validate"], "--jobs", []),
    (STUDY[:-4], "--trials", ["0"]),
    (["study", *SCEN, "--gpus", "8", "--trials", "2", "--no-tracking", "--storage", "sqlite:///{work}/s.db"], "--seed",
     [str(2**32)]),
    (["compare", *SCEN, "--gpus", "8", "--strategies", "random", "--no-tracking", "--out", "{work}/c"], "--budget", ["0"]),
    (["compare", *SCEN, "--gpus", "8", "--strategies", "random", "--no-tracking", "--out", "{work}/c"], "--seeds", ["0"]),
]
FLOAT_OPTIONS = [(STUDY, "--trial-timeout", ["0"])]
CHOICE_OPTIONS = [
    (["space", *SCEN], "--precision", ["bf17", "FP8X", "", "int4"]),
    (["space"], "--model", ["llama5", "", "../etc/passwd", "LLAMA3-8B ", "llama3-8b;ls"]),
    (["space", "--model", "llama3-8b"], "--cluster", ["mars-1bldg", "", "campus", "metro-2bldg\n"]),
    (STUDY, "--strategy", ["tpee", "", "bayes", "ppo2", "tpe,random"]),
    (STUDY, "--objectives", ["", "speed", "iteration_time_s,iteration_time_s", "iteration_time_s,,", "mfu"]),
    (STUDY, "--infeasible", ["ignore", "", "FAIL"]),
    (STUDY, "--backend", ["nope", "", "costmodel2", "os.system"]),
    (["compare", *SCEN, "--gpus", "8", "--no-tracking", "--out", "{work}/c"], "--strategies",
     ["", ",", "tpe,nope", "nope"]),
]

NUMERIC_LEAVES = ["model.n_layers", "model.hidden", "model.ffn_hidden", "model.n_heads", "model.n_kv_heads",
                  "model.vocab", "model.seq_len", "workload.global_batch_seqs", "workload.seq_len",
                  "cluster.zone_gpus", "cluster.buildings.0.gpus", "cluster.scale_out.bandwidth_Bps",
                  "cluster.scale_out.oversubscription", "cluster.scale_out.latency_s", "cluster.scale_out.n_paths",
                  "cluster.scale_out.queue_pairs", "cluster.scale_out.mtu_bytes", "cluster.scale_out.ib_timeout",
                  "cluster.cross_building.bandwidth_Bps", "cluster.cross_building.oversubscription",
                  "cluster.cross_building.distance_km", "cluster.cross_building.loss_rate",
                  "cluster.cross_building.latency_s", "cluster.cross_building.link_Bps",
                  "cluster.cross_building.n_paths"]
BAD_LEAF_VALUES = ["abc", "-1", "-0.5", "nan", "-inf", "-1e999", "!!int abc", "!!python/object/apply:os.system [ls]",
                   "[1, 2]", "{a: 1}", "", "null", "٣", "&a [*a]", "'", "\"unterminated", "1e999"]
BAD_SET_SYNTAX = ["model.nope=1", "cluster.scale_out.nope=1", "workload.nope=1", "nope.x=1", "model..n_layers=8",
                  "=5", "model.n_layers", ".=1", "cluster.buildings.99.gpus=8", "cluster.buildings.x.gpus=8",
                  "cluster.buildings.-1.gpus=8", "cluster.cross_region.loss_rate=1e-5", "model=", "cluster=7",
                  "model.n_layers.x=1", "workload=[1]", "cluster.scale_out=3", "model.name=a;b", "model.name=$(ls)",
                  "model.name=" + "x" * 300, "cluster.buildings=[]", "cluster.scale_out.load_balancing=magic",
                  "cluster.scale_out.loss_recovery=none", "workload.precision=fp4", "workload.fsdp_regather=sometimes",
                  "cluster.buildings.\u00b2.gpus=8", "cluster.buildings.\u0661.gpus=8", "cluster.buildings.+1.gpus=8",
                  "workload.moe_unpermute=atomic", "workload.moe_unpermute=scatter_add",
                  "workload.activation_memory=remat"]

CONFIG_FIELDS = ["tp", "cp", "ep", "pp", "dp", "pp_chunks", "micro_batch", "overlap_dp", "xb_queue_pairs",
                 "nccl_channels", "nccl_buffer_mib", "dp_bucket_mib"]
CATEGORICAL = ["placement", "dp_flavour", "pp_schedule", "recompute", "xb_load_balancing", "xb_loss_recovery",
               "collective", "nccl_protocol"]
BAD_CONFIG_INT = ["abc", "-1", "1.5", "٨", "1_000", str(2**63), "4611686018427387904", "", "nan", "1e3", "0x8",
                  "3", "7"]
BAD_CONFIG_CAT = ["nope", "", "1", "DP-OUT", "dp_out;ls", "x" * 300]
BAD_CONFIG_SYNTAX = ["tp", "=8", "tp==8", ",", "tp=8;pp=2", "nope=1", "tp=8 pp=2", "tp=8,tp=4", "{tp: 8}", "tp=",
                     "[tp=8]", "tp:8", "\x00"]

STORAGE = ["ftp://x/y", "sqlite:///{in}/missing/dir/s.db", "postgresql://u:p%2Fw@127.0.0.1:1/db",
           "mysql://u:p@127.0.0.1:1/db", "", "://", "http://127.0.0.1:1/db", "sqlite:///{in}",
           "sqlite:///{in}/notadb.txt", "postgresql://u:p@:99999/db", "oracle+nope://x", "sqlite:///{in}/zero.db",
           "sqlite:///{in}/garbled.db", "sqlite:////proc/nope/s.db", "not a url", "sqlite:///" + "x/" * 200 + "s.db",
           "postgresql://u@127.0.0.1:1/db?password=secret"]
TRACKING = ["ftp://x", "http://127.0.0.1:1", "https://u:pw@127.0.0.1:1",
            "sqlite:///{in}/missing/dir/m.db", "", "databricks", "mlflow://x", "sqlite:///{in}/notadb.txt",
            "sqlite:///{in}", "postgresql://u:p@127.0.0.1:1/m", "http://[::1", "http://u:p@x:99999"]
BACKEND_OPTIONS = [("command", "template=echo {tp"), ("command", "template=echo {nope}"), ("command", "timeout_s=-1"),
                   ("command", "timeout_s=abc"), ("command", "timeout_s=nan"), ("command", "shell=/nonexistent"),
                   ("command", "shell=python"), ("command", "nope=1"), ("command", "template="),
                   ("command", "template=echo `{tp}`"),
                   ("command", "template=echo $'{model}'"), ("command", "kill_grace_s=-5"),
                   ("command", "template=echo 'unterminated {tp}"), ("costmodel", "nope=1"),
                   ("costmodel", "params={in}/notparams.yaml"), ("local-torch", "nope=1"), ("command", "noequals"),
                   ("command", "=1")]

SCENARIO_FILES = {
    "list.yaml": b"- 1\n- 2\n", "scalar.yaml": b"42\n", "empty.yaml": b"", "null.yaml": b"null\n",
    "binary.yaml": bytes(range(256)) * 4, "latin1.yaml": "model: llama\xe9\n".encode("latin-1"),
    "deep.yaml": ("a: " + "[" * 500 + "]" * 500 + "\n").encode(),
    "deepmap.yaml": ("".join("  " * i + f"k{i}:\n" for i in range(300)) + "  " * 300 + "v: 1\n").encode(),
    "laughs.yaml": b"a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
                   b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
                   b"f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\nmodel: llama3-8b\ncluster: metro-2bldg\n",
    "dupkeys.yaml": b"model: llama3-8b\nmodel: llama3-70b\ncluster: metro-2bldg\n",
    "unknowntop.yaml": b"model: llama3-8b\ncluster: metro-2bldg\nnetwork: fast\n",
    "tabs.yaml": b"model:\tllama3-8b\n\tcluster: metro-2bldg\n",
    "pytag.yaml": b"model: !!python/object/apply:os.system [ls]\ncluster: metro-2bldg\n",
    "badtag.yaml": b"model: !!int abc\ncluster: metro-2bldg\n",
    "workload_list.yaml": b"model: llama3-8b\ncluster: metro-2bldg\nworkload: [1, 2]\n",
    "workload_str.yaml": b"model: llama3-8b\ncluster: metro-2bldg\nworkload: fast\n",
    "model_num.yaml": b"model: 7\ncluster: metro-2bldg\n",
    "preset_bad.yaml": b"model: {preset: llama9}\ncluster: metro-2bldg\n",
    "no_cluster.yaml": b"model: llama3-8b\n",
    "huge_int.yaml": b"model: llama3-8b\ncluster: metro-2bldg\nworkload: {global_batch_seqs: 99999999999999999999999}\n",
    "unterminated.yaml": b"model: \"llama3-8b\ncluster: metro-2bldg\n",
    "bom_utf16.yaml": "model: llama3-8b\ncluster: metro-2bldg\n".encode("utf-16"),
    "big.yaml": b"# " + b"x" * (2 * 2**20) + b"\nmodel: llama3-8b\ncluster: metro-2bldg\n",
    "cluster_nobuildings.yaml": b"model: llama3-8b\ncluster: {scale_out: {bandwidth_Bps: 1.0e9}}\n",
    "zero_bw.yaml": b"model: llama3-8b\ncluster: {preset: metro-2bldg, scale_out: {bandwidth_Bps: 0}}\n",
    "tiny_bw.yaml": b"model: llama3-8b\ncluster: {preset: metro-2bldg, cross_building: {bandwidth_Bps: 5.0e-324}}\n",
    "merge_key.yaml": b"base: &b {model: llama3-8b}\n<<: *b\ncluster: metro-2bldg\n",
}
MISUSE = [
    ("validate", "--params", "{in}/bad.yaml"), ("evaluate", *SCEN, "--config", GOOD_CONFIG, "--params", "{in}/bad.yaml"),
    ("validate", "--fit", "--write", "{in}"), ("validate", "--fit", "--write", "{in}/missing/p.yaml"),
    ("validate", "--write", "{work}/p.yaml"), ("validate", "--jobs", "2"), ("validate", "--runs", ""),
    ("validate", "--runs", " "), ("kernels", "--free-knee"), ("kernels", "--data", ""),
    ("timeline", *SCEN, "--config", GOOD_CONFIG, "--out", "{work}/tl.txt"),
    ("timeline", *SCEN, "--config", GOOD_CONFIG, "--out", "{in}"),
    ("sensitivity", *SCEN, "--out", "{work}/s.txt"), ("sensitivity", *SCEN, "--out", "{work}/s"),
    ("search", *SCEN, "--robust-samples", "4"), ("search", *SCEN, "--robust-objective", "worst"),
    ("search", *SCEN, "--robust-seed", "3"), (*STUDY, "--strategy", "random", "--strategy-option", "batch=3"),
    (*STUDY, "--strategy", "exhaustive", "--strategy-option", "x=1"),
    ("evaluate", *SCEN, "--config", "tp=8,,pp=2"), ("evaluate", *SCEN, "--config", "tp=8,pp=2,"),
    ("evaluate", *SCEN, "--config", "tp=1,pp=2,tp=8"),
    ("compare", *SCEN, "--gpus", "8", "--no-tracking", "--out", "{work}/c", "--strategies", "random,random"),
    ("evaluate", *SCEN, "--config", "tp=8,overlap_dp=true"),
    ("calibrate", *SCEN, "--backend", "costmodel", "--out", "{in}"),
    ("calibrate", *SCEN, "--backend", "costmodel", "--out", "{in}/missing/x.yaml"),
    ("calibrate", *SCEN, "--backend", "costmodel", "--out", "{work}/x.txt"),
    ("calibrate", *SCEN, "--backend", "costmodel", "--seed", "-1"),
    ("calibrate", *SCEN, "--backend", "costmodel", "--xb-mbit", "nan"),
    ("calibrate", *SCEN, "--backend", "costmodel", "--xb-mbit", "1_000"),
    ("calibrate", *SCEN, "--backend", "costmodel", "--xb-mbit", "inf"),
    ("search", *SCEN, "--robust", "cluster.cross_building.loss_rate=1e-6..1e-3", "--robust-seed", "-1"),
    ("explain", *SCEN, "--html", "/proc/nope/x.html"), ("explain", *SCEN, "--html", "{work}/r.txt"),
    ("explain", *SCEN, "--out", "{work}/ex", "--html", "{in}/missing/r.html"),
    ("sensitivity", *SCEN, "--out", "/proc/nope/s.png"), ("sensitivity", *SCEN, "--axis", "loss,loss"),
    ("report", "--study-name", "x", "--storage", "sqlite:///{work}/none.db", "--out", "{work}/s.db"),
    ("space", *SCEN, "--set", "model.n_layers=true"), ("space", *SCEN, "--set", "model.n_layers=1_6"),
    ("space", *SCEN, "--set", "model.n_layers=0x10"), ("space", *SCEN, "--set", "workload.global_batch_seqs="),
    ("space", *SCEN, "--set", "model.n_layers=1:30"), ("space", *SCEN, "--set", "model.n_layers=" + "9" * 5000),
    ("space", *SCEN, "--set", "model.n_layers=" + "9" * 40), ("space", *SCEN, "--gpus", "9" * 5000),
    ("evaluate", *SCEN, "--config", "tp=" + "9" * 5000),
    ("evaluate", *SCEN, "--config", "{in}/octal.yaml"),
    (*STUDY[:-2], "--storage", "sqlite:///{work}/s.db", "--study-name", ""),
    (*STUDY[:-2], "--storage", "sqlite:///{work}/s.db", "--study-name", "  "),
    ("worker", "--study-name", "", "--storage", "sqlite:///{work}/s.db", "--no-tracking"),
    ("worker", "--study-name", "x", "--precision", "fp8", "--storage", "sqlite:///{work}/s.db", "--no-tracking"),
    (*STUDY, "--strategy", "guided", "--strategy-option", "prior_weight=nan"),
    (*STUDY, "--strategy", "guided", "--strategy-option", "batch=1_0"),
    ("compare", *SCEN, "--gpus", "8", "--no-tracking", "--out", "{work}/c", "--strategies", "random",
     "--tracking-uri", "http://u:pw@127.0.0.1:1"),
    ("timeline", "--model", "llama3-405b", "--cluster", "campus-5bldg", "--global-batch", "76800", "--config",
     "tp=8,pp=32,dp=40,micro_batch=1", "--out", "{work}/t.png"),
    ("importance", "--storage", "sqlite:///{work}/none.db", "--study-name", "x"),
    ("report", "--storage", "sqlite:///{work}/none.db", "--study-name", "x", "--out", "{work}/r.html"),
]
"""Mistakes a reviewer found answered with a traceback, an exit 0 or silence (twenty-fourth session)."""
SCENARIO_PATHS = ["{in}/missing.yaml", "{in}", "/dev/zero", "/proc/self/mem", "", "{in}/" + "x" * 300 + ".yaml"]


def _valid_scenario() -> dict:
    from autotune.specs.presets import preset_dict
    return {"model": preset_dict("models", "llama3-8b"), "workload": {"global_batch_seqs": 512},
            "cluster": preset_dict("clusters", "metro-2bldg")}


def leaves(tree, prefix=()):
    """(path, value) of every scalar in a nested mapping/list (shared with test_fuzz_input)."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from leaves(v, prefix + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from leaves(v, prefix + (i,))
    else:
        yield prefix, tree


def set_path(tree, path, value):
    node = tree
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


MUTANTS = ["abc", -1, -0.5, float("nan"), float("-inf"), [1, 2], {"x": 1}, "", None, True, 2**70, "٣"]


# ----------------------------------------------------------------------------- cases
def cases() -> list[Case]:
    import copy
    out: list[Case] = []
    for prefix, opt, extra in INT_OPTIONS:
        for v in BAD_INT + extra:
            out.append(Case("argv-int", (*prefix, opt, v)))
    for prefix, opt, extra in FLOAT_OPTIONS:
        for v in BAD_FLOAT + extra:
            out.append(Case("argv-float", (*prefix, opt, v)))
    for prefix, opt, values in CHOICE_OPTIONS:
        for v in values:
            out.append(Case("argv-choice", (*prefix, opt, v)))
    for cmd in (["space", *SCEN], ["evaluate", *SCEN, "--config", GOOD_CONFIG]):
        for leaf in NUMERIC_LEAVES:
            for v in BAD_LEAF_VALUES:
                if v in ("", "null") and leaf.split(".")[-1] in _OPTIONAL:
                    continue                           # unset is the default there
                out.append(Case("set-value", (*cmd, "--set", f"{leaf}={v}")))
        for s in BAD_SET_SYNTAX:
            out.append(Case("set-syntax", (*cmd, "--set", s)))
    for name, data in SCENARIO_FILES.items():
        out.append(Case("scenario-file", ("space", "--scenario", "{in}/" + name), ((name, data),)))
    for p in SCENARIO_PATHS:
        out.append(Case("scenario-path", ("space", "--scenario", p)))
    base = _valid_scenario()
    paths = [p for p, v in leaves(base) if p[-1] not in ("name", "source", "region")]
    rng = random.Random(17)
    for i in range(1400):
        p, v = rng.choice(paths), rng.choice(MUTANTS)
        old = dict(leaves(base))[p]
        if v == old or (isinstance(v, bool) and not isinstance(old, str)) or (v is None and p[-1] in _OPTIONAL):
            continue
        tree = copy.deepcopy(base)
        set_path(tree, p, v)
        text = yaml.safe_dump(tree, allow_unicode=True).encode()
        out.append(Case("scenario-mutant", ("evaluate", "--scenario", "{in}/s.yaml", "--config", GOOD_CONFIG),
                        (("s.yaml", text),)))
    for f in CONFIG_FIELDS:
        for v in BAD_CONFIG_INT:
            if v in ("3", "7") and f not in ("tp", "pp", "cp", "dp"):
                continue                                 # 3 and 7 break the GPU product only for the degrees
            out.append(Case("config-text", ("evaluate", *SCEN, "--config", f"{GOOD_CONFIG},{f}={v}")))
            out.append(Case("config-file", ("evaluate", *SCEN, "--config", "{in}/c.yaml"),
                            (("c.yaml", f"tp: 8\npp: 2\ncp: 2\n{f}: {v!r}\n".encode()),)))
    for f in CATEGORICAL:
        for v in BAD_CONFIG_CAT:
            out.append(Case("config-text", ("evaluate", *SCEN, "--config", f"{GOOD_CONFIG},{f}={v}")))
            out.append(Case("config-file", ("evaluate", *SCEN, "--config", "{in}/c.yaml"),
                            (("c.yaml", f"tp: 8\npp: 2\ncp: 2\n{f}: {v!r}\n".encode()),)))
    for s in BAD_CONFIG_SYNTAX:
        out.append(Case("config-text", ("evaluate", *SCEN, "--config", s)))
    for name, data in (("list.yaml", b"[tp, 8]\n"), ("dup.yaml", b"tp: 8\ntp: 4\n"), ("deep.yaml", b"tp: " + b"[" * 400),
                       ("bin.yaml", bytes(range(256))), ("empty.yaml", b"")):
        out.append(Case("config-file", ("evaluate", *SCEN, "--config", "{in}/" + name), ((name, data),)))
    files = (("notadb.txt", b"hello, not sqlite\n" * 100), ("zero.db", b""),
             ("garbled.db", b"SQLite format 3\x00" + bytes(range(256)) * 40), ("notparams.yaml", b"params: [1, 2]\n"))
    for uri in STORAGE:
        codes = (3,) if any(f"{{in}}/{n}" in uri for n in ("notadb.txt", "zero.db", "garbled.db")) else (2,)
        out.append(Case("storage-uri", (*STUDY[:-2], "--storage", uri), files, codes))
        out.append(Case("storage-uri", ("worker", "--study-name", "nope", "--storage", uri, "--no-tracking"), files,
                        codes))
    for uri in TRACKING:
        codes = (3,) if "{in}/notadb.txt" in uri else (2,)
        out.append(Case("tracking-uri", (*STUDY[:-3], "--storage", "sqlite:///{work}/s.db", "--tracking-uri", uri),
                        files, codes))
    for backend, opt in BACKEND_OPTIONS:
        out.append(Case("backend-option", (*STUDY, "--backend", backend, "--backend-option", opt), files))
    for args in (("search", *SCEN, "--out", "{in}/afile"), ("search", *SCEN, "--out", "/proc/nope/x"),
                 ("study", *STUDY[1:], "--out", "{in}/afile"), ("compare", *SCEN, "--gpus", "8", "--strategies",
                                                                 "random", "--no-tracking", "--out", "{in}/afile"),
                 ("validate", "--runs", "{in}/missing.csv"), ("validate", "--runs", "{in}/empty.csv"),
                 ("validate", "--runs", "{in}/header_only.csv"), ("validate", "--runs", "{in}/bin.csv"),
                 ("validate", "--runs", "{in}/nocols.csv"), ("validate", "--runs", "{in}"),
                 ("validate", "--params", "{in}/notparams.yaml"), ("validate", "--params", "{in}/missing.yaml"),
                 ("evaluate", *SCEN, "--config", GOOD_CONFIG, "--params", "{in}/notparams.yaml"),
                 ("search", *SCEN, "--params", "{in}"), ("kernels", "--data", "{in}/missing"),
                 ("kernels", "--data", "{in}"), ("show", "llama9"), ("show", ""), ("validate", "--fit", "--loso"),
                 ("validate", "--runs", "reserved", "--fit"), ("nope",), ("space", "--nope"), ("study", "--trials")):
        out.append(Case("paths", args, files + (("afile", b"keep"), ("empty.csv", b""),
                                                ("header_only.csv", b"model,cluster\n"),
                                                ("bin.csv", bytes(range(256)) * 8),
                                                ("nocols.csv", b"a,b,c\n1,2,3\n"))))
    for args in MISUSE:      # an option that means nothing alone, a target that cannot be written, a repeat
        out.append(Case("misuse", args, (("bad.yaml", b"params:\n  a: [1,\n"), ("afile", b"keep"),
                                         ("octal.yaml", b"tp: 8\npp: 2\ncp: 2\ndp: 010\n"))))
    seen, unique = set(), []
    for c in out:
        if c.key not in seen:
            seen.add(c.key)
            unique.append(c)
    return unique


_OPTIONAL = {"cross_zone", "cross_region", "link_Bps", "global_batch_seqs", "seq_len", "head_dim",
             "sliding_window", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim", "expert_ffn_hidden"}
