"""One round's release, as a pure function: the replies in, the released update and the round's counts out.

    release(sent, replies, settings=, template=, aggregator=, noise=) -> (update, counts)

(docs/mechanism.md steps 7-8) A reply counts only if it answers one of this round's messages, from that message's
node, once (uedp.privacy.replies: a late reply, one to another round, from a node not sent the message, or a
node's second reply is refused and counted); error, malformed and missing replies (time-outs) contribute
zero; every counted update is re-checked (shape, finite, norm <= w_max * beta: re-clip or drop, counted; a
split update's two parts each against its own bound, beta and gamma, then summed:
uedp.privacy.aggregation.recheck_split), summed, noised with the round's sigma and divided by the public
denominator (uedp.privacy.aggregation.aggregate, or the aggregator a broken control passes). Noiseless
mechanisms divide by the number of valid replies instead (they have no guarantee, so they may look at the
data).

The counts hold no per-node number: sampled, drawn, truncated, replies, missing, failed of which malformed,
refused of which duplicate, the re-check statuses, and in non-private runs the mean train loss.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from flwr.app import Message

from uedp.flower.plan import MechanismSettings, RoundPlan
from uedp.privacy.aggregation import STATUSES, UNBOUNDED_NORM, AggregationStats, Aggregator, recheck_split, shapes_of
from uedp.privacy.noise import NoiseSource
from uedp.privacy.replies import intake
from uedp.protocol import ENTITY_UPDATE_RECORD, UPDATE_RECORD


def release(plan: RoundPlan, messages: Sequence[Message], replies: Iterable[Any], *, settings: MechanismSettings,
            template: list[np.ndarray], aggregator: Aggregator, noise: NoiseSource) -> tuple[list[np.ndarray],
                                                                                             dict[str, float]]:
    """The round's released update (noisy mean, or for a noiseless mechanism the mean of the valid replies), in
    the template's dtypes, and its counts (module docstring)."""
    spec = settings.spec
    shapes = shapes_of(template)
    got = intake(messages, replies, shapes=shapes, private=spec.private,
                 records=(UPDATE_RECORD, ENTITY_UPDATE_RECORD) if spec.split else (UPDATE_RECORD,))
    updates = []
    split_counts = dict.fromkeys(STATUSES, 0)
    for parts in got.updates:
        update = parts[0]
        if spec.split:  # each part against its own bound, then their sum
            update, status = recheck_split(parts[0], parts[1], shapes, w_max=settings.w_max, beta=settings.beta,
                                           gamma=settings.gamma)
            split_counts[status] += 1
            if update is None:
                continue
        updates.append(update)
    if spec.private:
        mean, stats = aggregator(updates, template=template, w_max=settings.w_max, beta=settings.beta + settings.gamma,
                                 sigma=plan.record.sigma, denominator=settings.denominator, noise=noise)
        if spec.split:  # the parts' re-check statuses (the sums all pass the second one)
            stats = AggregationStats(received=sum(split_counts.values()), **split_counts)
    else:
        mean, stats = aggregator(updates, template=template, w_max=1.0, beta=UNBOUNDED_NORM, sigma=0.0,
                                 denominator=1.0, noise=noise)
        mean = [m / max(1, stats.ok + stats.reclipped) for m in mean]  # the valid replies
    cohort = plan.cohort
    counts = {
        "sampled": float(cohort.size), "drawn": float(cohort.drawn), "truncated": float(bool(cohort.truncated)),
        "replies": float(stats.received), "missing": float(cohort.size - got.answered),
        **{k: float(v) for k, v in got.counts().items()},
        **{k: float(v) for k, v in stats.as_dict().items() if k != "received"},
    }
    if got.train_loss:  # non-private runs only; each loss finite, their mean scaled so as not to overflow
        loss = sum(v / len(got.train_loss) for v in got.train_loss)
        if math.isfinite(loss):
            counts["train_loss"] = loss
    return [np.asarray(m, dtype=t.dtype) for m, t in zip(mean, template)], counts
