#!/bin/bash
# One Flower simulation per population (UeDP, the population figure's settings); 5,000 users on a two-node
# Ray cluster (head 1 CPU + worker 1 CPU, separate `ray start` processes).
cd "$(dirname "$0")/.." && mkdir -p outputs/population
S="federation.eval_sentences=2000 federation.eval_every=30 privacy.m_max=160 strategy=uedp"
for n in ${FLOWER_SMALL:-}; do  # FLOWER_SMALL="200 1000": also those populations
  out=outputs/population/flower-$n
  [ -f $out/summary.json ] || OMP_NUM_THREADS=1 .venv/bin/python -m experiments.run runner=simulation \
    dataset.options.num_users=$n privacy.q_u=$(python3 -c "print(100/$n)") $S hydra.run.dir=$out > $out.log 2>&1
done
out=outputs/population/flower-5000
[ -f $out/summary.json ] || OMP_NUM_THREADS=1 .venv/bin/python -m experiments.ray_cluster --cpus 1 --worker-cpus 1 \
  --report docs/figures/population-flower-5000-nodes.json -- .venv/bin/python -m experiments.run runner=simulation \
  federation.ray_address=ADDRESS dataset.options.num_users=5000 privacy.q_u=0.02 $S hydra.run.dir=$out > $out.log 2>&1
