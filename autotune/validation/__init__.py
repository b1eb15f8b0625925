"""Validation of the cost model against measured runs (``published_runs.csv`` format).

Each CSV row becomes a single-building Scenario and a Config; the model's iteration time is
converted into the row's own metric with the row's own FLOP convention; every row is either
scored or skipped with a one-line reason naming the row, the column and the value.
Assumptions for unstated values are named constants here.

Three ways to score (``autotune validate``):

* in-sample: the shipped calibration (or ``--fit``: parameters fit on these very rows);
* leave-one-source-family-out (``--loso``): rows are grouped into source families
  (:func:`source_family`); for each family the parameters are fit (:func:`fit_params`) on every
  *other* family's rows and only the held-out family's rows are scored with them, so each row
  is scored exactly once by a fit that never saw its family;
* rank correlation (:func:`rank_correlations`): within a *configuration group* (rows of one
  source family with the same model architecture, GPU type and metric, at least
  :data:`RANK_MIN_ROWS` rows and at least two parallel layouts), the Spearman correlation
  between predicted and measured values: does the model order the configurations as the
  measurements do.

Reading a file (``--runs``): column names are matched after trimming, lower-casing and turning
spaces and hyphens into underscores. An unknown column is ignored and listed, except one that
looks like a misspelling of a known column (:data:`TYPO_CUTOFF`): a row with a value there is
skipped, since that value would otherwise be silently replaced by an assumption. Values that do
not parse, impossible architectures or parallel layouts, and anything else that keeps a row
from being scored skip that row only; a file with no scoreable row is a one-line error.
"""
from __future__ import annotations

from .columns import (COLUMNS, METRICS, NO_SOURCE_FAMILY, REQUIRED_COLUMNS, Skip, map_flavour, map_gpu, map_schedule,  # noqa: F401
                      one_line, reserved_runs_path, shipped_runs_path, source_family)
from .fit import (FIT_BOUNDS, default_jobs, fit_params, loso, validate, write_params)  # noqa: F401
from .predict import predicted_metric, resolve_unstated, score  # noqa: F401
from .rank import RANK_MIN_ROWS, _layout, configuration_groups, rank_correlations, spearman  # noqa: F401
from .rows import RunCase, build_case  # noqa: F401
from .runs_file import Runs, load_runs, read_runs  # noqa: F401
