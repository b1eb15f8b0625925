"""Optuna samplers as strategies: the study's sampler proposes; we only choose and configure it."""
from __future__ import annotations

from ..errors import UserInputError
from ..space import config_at
from ..trials import proposed_by, trial_config
from .base import SAMPLER, Strategy
from .samplers import CONSTRAINT_KEY, STARTUP_TRIALS, SUPPORTS_CONSTRAINTS, make_sampler  # noqa: F401 - public here too

STARTUPS = ("legal", "fits", "model", "index")
"""How TPE's start-up trials are drawn (``--strategy-option startup=...``; a study's default is
``default_startup``'s: ``model`` wherever the model is a prior, ``legal`` where it is the objective):

- ``legal``: uniformly from the legal space. Index vectors drawn uniformly are not uniform over
  legal configurations once decoded.
- ``fits``: uniformly from the legal configurations the memory model says fit (of 256 legal
  draws, the first that fits; a legal draw if none does). Uses the memory model only, not the
  time model: what a user checks anyway before launching a run.
- ``model``: the cost model's best-ranked configurations, a diverse batch
  (``guided.diverse_batch``: each at least 2 knobs from the others), ranked by the study
  scenario's model under the shipped calibration. For a real backend, where the model
  is a prior and not the objective. On the cost-model backend it hands TPE the objective's own
  optimum, so ``compare`` on the cost model keeps ``legal``.
- ``index``: TPE's own start-up over index vectors (the ablation's baseline)."""


def default_startup(backend) -> str:
    """A new TPE study's start-up when ``startup`` is not given, from the backend as built:
    ``legal`` on the cost-model backend at the shipped calibration (its parameters compared, not
    its options' spelling: there the model's top batch would be the objective's own optimum, so TPE
    would be judged on nothing), ``model`` on every other backend (real runs, plugins, the cost
    model under another calibration): what the project knows is the best first guess there.
    The study stores the result, so resumes and workers keep it. Measured on generated scenarios
    against a perturbed "truth" (README, ``experiments/cold_search.py``)."""
    from ..backends import CostModelBackend
    from ..costmodel.params import default_params
    if isinstance(backend, CostModelBackend) and backend.params in (None, default_params()):
        return "legal"
    return "model"


class OptunaStrategy(Strategy):
    """The study's Optuna sampler proposes. For TPE the start-up trials come from ``startup``
    (STARTUPS), then TPE models them.

    The start-up phase is the study's: its length is the number of start-up trials the study holds
    (trials this strategy proposed, interrupted ones left out), so a resumed study or a worker
    continues it where it is, as one process would, and several workers share one start-up (two
    may both draw the last ones). The model's start-up batch depends on the space only, so a
    resumed study proposes its next unmeasured member."""

    def __init__(self, name: str = "tpe", startup: str = "legal"):
        if startup not in STARTUPS:
            raise UserInputError("strategy option startup", startup, "one of " + ", ".join(STARTUPS))
        if startup != "legal" and name != "tpe":
            raise UserInputError("strategy option startup", startup, f"legal for {name} (start-up choices are TPE's)")
        self.name = self.sampler_name = name
        self.startup = startup
        self._model_batch = None

    def bind(self, space, encoding, seed):
        super().bind(space, encoding, seed)
        self._startup_over = self.name != "tpe" or self.startup == "index"
        self._model_batch = None

    def _from_model(self, study):
        """The first member of the model's diverse top batch the study does not hold yet; None
        once every member is held (the sampler's draws then fill the start-up)."""
        from .guided import config_key, diverse_batch, rank
        if self._model_batch is None:
            ranked = rank(self.space, self.space.scenario, pool=max(16 * STARTUP_TRIALS, 512))
            self._model_batch = diverse_batch(ranked, set(), STARTUP_TRIALS)
        held = {config_key(c) for c in map(trial_config, study.get_trials(deepcopy=False)) if c}
        return next((c for c in self._model_batch if config_key(c.model_dump()) not in held), None)

    def propose(self, study):
        # once the study holds its start-up it always will: that fact is cached, never counted again
        if self._startup_over or len(proposed_by(study, self.name)) >= STARTUP_TRIALS:
            self._startup_over = True
            return SAMPLER
        if self.startup == "model":
            c = self._from_model(study)
            if c is not None:
                return self.encoding.encode(c)
        n = 256 if self.startup == "fits" else 1
        b = self.space.sample(n, seed=int(self.rng(study).integers(0, 2**63 - 1)))
        i = 0
        if self.startup == "fits":
            from ..costmodel import evaluate_batch
            fits = evaluate_batch(self.space.scenario, b, check=False)["feasible"]
            i = int(fits.argmax()) if fits.any() else 0
        return self.encoding.encode(config_at(b, i))
