"""The pipeline closed form against the event simulator where communication latency dominates:
llama-mini over local-2bldg, pp = 4 and 8 ranks (PP-out, 2 buildings), a 50 ms cross-building hop
and links fast enough that bandwidth never paces, 1F1B and interleaved 1F1B at micro-batch 1-8.

    python experiments/pipeline_closed_form_check.py      # a few seconds
"""
from __future__ import annotations

import statistics

from autotune.costmodel.simulator import simulate
from autotune.specs import Config, build_scenario


def main() -> None:
    errors = []
    for gpus in (4, 8):
        scen = build_scenario("llama-mini", "local-2bldg", gpus=gpus, overrides=[
            "workload.global_batch_seqs=32", "cluster.cross_building.latency_s=0.05",
            "cluster.cross_building.bandwidth_Bps=1e12"])
        for sched, chunks in (("1f1b", 1), ("interleaved_1f1b", 2)):
            for mb in (1, 2, 4, 8):
                cfg = Config(tp=1, pp=gpus, dp=1, placement="pp_out", dp_flavour="ddp", pp_schedule=sched,
                             pp_chunks=chunks, micro_batch=mb, overlap_dp=0)
                try:
                    r = simulate(scen, cfg)
                except RuntimeError as e:          # a schedule the simulator cannot order
                    print(f"pp={gpus} {sched} mb={mb}: {e}")
                    continue
                err = 100 * (r["closed_form_pipeline_s"] / r["pipeline_s"] - 1)
                errors.append(abs(err))
                print(f"pp={gpus} {sched:17} mb={mb}: simulated {r['pipeline_s']:.3f} s, "
                      f"closed form {r['closed_form_pipeline_s']:.3f} s ({err:+.1f}%)")
    print(f"{len(errors)} cases, median |error| {statistics.median(errors):.1f}%")


if __name__ == "__main__":
    main()
