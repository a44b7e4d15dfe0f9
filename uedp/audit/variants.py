"""The audit's variants: which mechanism each trains, with which defect, judged against which twin.

- fedavg: noiseless FedAvg (shows the audit has power);
- uedp, user_dp: the sound mechanisms at the run defaults (calibrated to privacy.target_epsilon);
- control_a (too little noise) and control_b (per-step gradient clipping, no update clip, no server
  re-check): the broken components of uedp.audit.controls, applied to user-level DP (docs/audit.md says
  why), each judged against its sound twin (`reference`);
- user_dp_beta1: control (a)'s twin, user-level DP at the same beta with the correct noise;
- private_tokenizer: UeDP with its tokenizer trained on the users' training split
  (tokenizer.source=private_split, the pipeline's first default) instead of the public corpus:
  frequent canaries become tokens, so their secrets leak through the vocabulary whatever the noise
  (docs/audit.md, "The tokenizer trained on the private split leaks"). Judged against `uedp`, the same mechanism with
  the default public tokenizer.
  Every other variant runs the default pipeline as is (the public tokenizer), unless `--set
  tokenizer.source=...` says otherwise.

Both audits clip below FedAvg's update norms (quick: beta 0.1; full: the default 0.2), so control (b)'s
missing update clip matters. At such a beta the clip alone keeps even a noiseless run from memorizing as
much, which hid control (a)'s defect (docs/audit.md, Findings 4 and 6). So control (a) runs at beta 1.0,
where the clip rarely binds, beside `user_dp_beta1`. Beta does not enter the claimed epsilon (the noise is z
times the sensitivity), so each pair differs only in the defect under test.
"""

from __future__ import annotations

from dataclasses import dataclass

from uedp.privacy.mechanisms import MechanismSpec, spec_for

TOO_LITTLE_NOISE = "too_little_noise"
PER_STEP_CLIPPING = "per_step_clipping"
PRIVATE_SPLIT_TOKENIZER = "private_split_tokenizer"


@dataclass(frozen=True)
class Variant:
    name: str
    strategy: str  # config strategy.name
    defect: str | None = None  # TOO_LITTLE_NOISE | PER_STEP_CLIPPING | PRIVATE_SPLIT_TOKENIZER | None (sound)
    reference: str | None = None  # the sound twin a control is judged against
    beta: float | None = None  # privacy.beta forced for this variant (None: the audit's setting)
    tokenizer: str | None = None  # tokenizer.source forced for this variant (None: the audit's setting)

    @property
    def spec(self) -> MechanismSpec:
        return spec_for(self.strategy, "f_E+")


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("fedavg", "fedavg"),
    Variant("uedp", "uedp"),
    Variant("user_dp", "user_dp"),
    Variant("control_a", "user_dp", defect=TOO_LITTLE_NOISE, reference="user_dp_beta1", beta=1.0),
    Variant("control_b", "user_dp", defect=PER_STEP_CLIPPING, reference="user_dp"),
    Variant("user_dp_beta1", "user_dp", beta=1.0),
    Variant("private_tokenizer", "uedp", defect=PRIVATE_SPLIT_TOKENIZER, reference="uedp", tokenizer="private_split"),
)}
