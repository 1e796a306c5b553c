"""evo peer for tests/eval.rs: the trajectory metrics of an estimate against ground truth, as
evo (PyPI `evo`, the reference tool for them) computes them: both TUM files associated by stamp,
the estimate aligned with Umeyama's Sim(3) (evo_ape/evo_rpe --align --correct_scale), the APE of
the translation part and the RPE of the translation and of the rotation angle (degrees) between
frames `--delta` apart. Prints one JSON line.

    python evo_metrics.py --gt GT.tum --est EST.tum --delta 1
"""
import argparse
import copy
import json

from evo.core import metrics, sync
from evo.tools import file_interface


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gt", required=True)
    ap.add_argument("--est", required=True)
    ap.add_argument("--delta", type=int, default=1)
    args = ap.parse_args()
    ref = file_interface.read_tum_trajectory_file(args.gt)
    est = file_interface.read_tum_trajectory_file(args.est)
    ref, est = sync.associate_trajectories(ref, est, max_diff=1e-3)
    aligned = copy.deepcopy(est)
    r, t, s = aligned.align(ref, correct_scale=True)
    out = {"scale": float(s), "matched": len(ref.timestamps)}
    ape = metrics.APE(metrics.PoseRelation.translation_part)
    ape.process_data((ref, aligned))
    out["ape"] = {k: float(ape.get_statistic(getattr(metrics.StatisticsType, k))) for k in ["rmse", "mean", "median", "max"]}
    for name, relation in [("rpe_translation", metrics.PoseRelation.translation_part),
                           ("rpe_rotation_deg", metrics.PoseRelation.rotation_angle_deg)]:
        rpe = metrics.RPE(relation, delta=args.delta, delta_unit=metrics.Unit.frames, all_pairs=False)
        rpe.process_data((ref, aligned))
        out[name] = {k: float(rpe.get_statistic(getattr(metrics.StatisticsType, k))) for k in ["rmse", "mean", "median", "max"]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
