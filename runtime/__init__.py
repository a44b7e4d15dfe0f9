"""How a run is executed: in this process (local_grid), as a Ray-backed Flower simulation (simulate), as
real separate Flower processes (federation, processes, tls), on a Ray cluster (ray_cluster), or as one
Hydra job (hydra_job). Runners and process supervision only: what a round computes is server/, client/ and
strategies/; what is measured is studies/; experiments/ holds the thin commands."""
