"""Hardening (issue 17, item 1): shell injection through the ``command`` backend. Passwords:
test_hardening_secrets.py; runaway commands and bad backend options: test_hardening_processes.py;
bounded inputs: test_hardening_inputs.py. Helpers in hardening_common.py."""
from __future__ import annotations

import json
import sys

import optuna
import pytest
import yaml

from autotune.specs import Config, build_scenario
from autotune.specs.presets import preset_dict

from hardening_common import JSON_LINE, SCEN, assert_one_line_error, run, scen  # noqa: F401 - scen is a fixture


# =============================================================== 1. shell injection
MARK = "PWNED"


def payloads(marker) -> list[str]:
    """Each one runs ``touch marker`` if a field reaches the shell unquoted or badly quoted."""
    m = str(marker)
    return [f"x; touch {m}; echo", f"$(touch {m})", f"`touch {m}`", f"x\ntouch {m}\necho",
            f"x' ; touch {m} ; echo '", f'x" ; touch {m} ; echo "', f"x'\"$(touch {m})\"'",
            f"x\\'; touch {m}; echo \\'", f"a b && touch {m} || touch {m}", f"x | touch {m}"]


def with_model_name(scen, name):
    """The scenario with a model name that never went through validation (a tampered study,
    a plugin building specs by hand)."""
    return scen.model_copy(update={"model": scen.model.model_copy(update={"name": name})})


CONTEXTS = {                         # where a field can sit in a template, and what it prints
    "bare": ("printf %s {F} > {out}", ""),
    "double-quoted": ('printf %s "{F}" > {out}', ""),
    "single-quoted": ("printf %s '{F}' > {out}", ""),
    "command substitution": ('printf %s "$(printf %s {F})" > {out}', ""),
    "option value": ("printf %s --model={F} > {out}", "--model="),
    "comment": ("printf %s {F} > {out} # and again: {F}", ""),
}


@pytest.mark.filterwarnings("ignore::UserWarning")          # pydantic on the hand-made configurations
@pytest.mark.parametrize("context", CONTEXTS)
def test_quoting_alone_stops_every_payload_in_every_field(context, scen, tmp_path, monkeypatch):
    """Payloads in the model name and in every configuration field, with the safe-character
    check of values switched off: quoting alone must keep each value one literal word."""
    from autotune.backends import command
    monkeypatch.setattr(command, "SAFE_VALUE_CHARS", None, raising=False)
    marker, out = tmp_path / MARK, tmp_path / "out"
    ran = 0
    fields = ["model"] + list(Config.model_fields)
    for field in fields:
        shape, prefix = CONTEXTS[context]
        template = JSON_LINE + "; " + shape.replace("{F}", "{" + field + "}").replace("{out}", str(out))
        b = command.CommandBackend(template=template, timeout_s=10)
        for p in payloads(marker):
            s, cfg = scen, Config()
            if field == "model":
                s = with_model_name(scen, p)
            else:
                cfg = Config.model_construct(**(Config().model_dump() | {field: p}))
            out.unlink(missing_ok=True)
            try:
                m = b.measure(s, cfg)
            except Exception:        # noqa: BLE001 - refusing a value is fine; running it is not
                m = None
            assert not marker.exists(), (context, field, p)
            if m is not None and not m.failed and field in ("model", "placement", "collective"):
                assert out.read_text() == prefix + p, (context, field, p, out.read_text())
                ran += 1
    assert ran > 0                      # the commands did run, each value arriving exactly as it was


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_safe_value_check_refuses_payloads_before_any_shell(scen, tmp_path):
    from autotune.backends.command import CommandBackend
    marker = tmp_path / MARK
    b = CommandBackend(template=f"echo {{model}} {{placement}}; {JSON_LINE}", timeout_s=10)
    for p in payloads(marker):
        m = b.measure(with_model_name(scen, p), Config())
        assert m.failed and "model" in m.reason and not marker.exists()
        m = b.measure(scen, Config.model_construct(**(Config().model_dump() | {"placement": p})))
        assert m.failed and "placement" in m.reason and not marker.exists()
    assert not b.measure(scen, Config()).failed


def test_names_with_spaces_and_parentheses_still_reach_the_command_as_one_word(scen, tmp_path):
    from autotune.backends.command import CommandBackend
    out = tmp_path / "argv"
    b = CommandBackend(template=f"{sys.executable} -c 'import sys, json; print(json.dumps(sys.argv[1:]))' "
                                f"{{model}} --x=\"{{model}}\" > {out}; {JSON_LINE}")
    name = "GPT-174.6B (PTD-P)"
    assert not b.measure(with_model_name(scen, name), Config()).failed
    assert json.loads(out.read_text()) == [name, f"--x={name}"]


@pytest.mark.parametrize("how", ["--set", "scenario file"])
def test_injection_through_the_cli_never_runs(how, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / MARK
    refused = 0
    for i, p in enumerate(payloads(marker)):
        if how == "--set":
            src = [*SCEN, "--set", f"model.name={p}"]
        else:
            model = preset_dict("models", "llama3-8b") | {"name": p}
            f = tmp_path / "scen.yaml"
            f.write_text(yaml.safe_dump({"model": model, "cluster": preset_dict("clusters", "metro-2bldg")}))
            src = ["--scenario", str(f)]
        db = tmp_path / f"s{i}.db"
        code, out, err = run(["study", *src, "--strategy", "random", "--trials", "1", "--backend", "command",
                              "--backend-option", f"template=echo {{model}}; {JSON_LINE}",
                              "--storage", f"sqlite:///{db}", "--no-tracking"])
        assert not marker.exists(), p
        if code != 0:       # YAML folds "x\ntouch m\necho" given to --set into a harmless "x touch m echo"
            assert_one_line_error(code, err, "model.name")
            assert not db.exists()
            refused += 1
    assert refused >= len(payloads(marker)) - 1


def test_injection_through_a_tampered_shared_study_never_runs(tmp_path, monkeypatch):
    """A worker reads the scenario from the shared storage: a name planted there must not run."""
    monkeypatch.chdir(tmp_path)
    storage = f"sqlite:///{tmp_path}/s.db"
    code, out, err = run(["study", *SCEN, "--strategy", "random", "--trials", "1", "--storage", storage,
                          "--study-name", "shared", "--no-tracking", "--json"])
    assert code == 0, err
    marker = tmp_path / MARK
    study = optuna.load_study(study_name="shared", storage=storage)
    scen = build_scenario("llama3-8b", "metro-2bldg")
    for p in payloads(marker)[:4]:
        bad = with_model_name(scen, p)
        study._storage.set_study_system_attr(study._study_id, "autotune:scenario_json", bad.model_dump_json())
        code, out, err = run(["worker", "--study-name", "shared", "--storage", storage, "--until", "3",
                              "--backend", "command", "--backend-option", f"template=echo {{model}}; {JSON_LINE}",
                              "--no-tracking"])
        assert not marker.exists(), p
        assert_one_line_error(code, err, "model.name")
