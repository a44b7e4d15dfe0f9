#!/bin/bash
# A bring-your-own JSONL classification corpus (2,000 owners, one label each; write it first with
# python -m experiments.owner_files --one-file outputs/byo/owners-2000.jsonl --dataset synthetic -o num_users=2000 \
#   -o seed=11 -o min_sentences=10 -o max_sentences=30 --split train --split valid --split test \
#   --one-label-per-owner --no-entities   (docs/results.md, "Bring-your-own JSONL corpora"); experiments.owner_files from the
# generator at seed 11, no hand-labelled entities), every setting at the defaults of dataset=jsonl.
cd "$(dirname "$0")/.." && mkdir -p outputs/byo

for s in uedp fedavg user_dp; do
  out=outputs/byo/$s
  [ -f $out/summary.json ] || OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python -m experiments.run runner=local dataset=jsonl \
    dataset.options.path=outputs/byo/owners-2000.jsonl task=classification strategy=$s hydra.run.dir=$out > $out.log 2>&1
done
