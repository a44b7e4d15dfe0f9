"""Entry points: the main job, the Hydra runner, sweeps, benchmarks, audits."""
