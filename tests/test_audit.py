"""The audit's statistics (hand-computed cases) and its broken controls (uedp.audit)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uedp.audit import membership
from uedp.audit.controls import ReducedNoise, UnclippedUpdate, broken_std, clip_each_step, unchecked_aggregate
from uedp.audit.exposure import chance_p_value, exposure, rank_epsilon_lower_bound, rank_of
from uedp.config import RunConfig
from uedp.privacy.noise import GaussianNoise

# Hand-computed cases compare a closed form with the code's float64 evaluation of the same formula in another
# order (a few ulps): pytest.approx's default rel 1e-6 is ample, and a wrong formula is off by far more.


def test_rank_counts_ties_against_the_secret():
    assert rank_of(1.0, [0.5, 1.0, 2.0, 3.0]) == 3
    assert rank_of(0.1, [0.5, 1.0]) == 1
    with pytest.raises(ValueError):
        rank_of(float("nan"), [1.0])


def test_exposure_hand_computed():
    assert exposure(1, 1023) == pytest.approx(10.0)
    assert exposure(1024, 1023) == pytest.approx(0.0)
    assert exposure(32, 1023) == pytest.approx(5.0)
    with pytest.raises(ValueError):
        exposure(0, 10)


def test_rank_bound_hand_computed():
    # ln((0.05 - 1e-5) * 10000 / 1) = ln(499.9)
    assert rank_epsilon_lower_bound(1, 9999, delta=1e-5) == pytest.approx(math.log(499.9))
    # Bonferroni over 4 tests: ln(0.0125 * 10000 / 5) = ln(25)
    assert rank_epsilon_lower_bound(5, 9999, delta=0.0, tests=4) == pytest.approx(math.log(25))
    assert rank_epsilon_lower_bound(5000, 9999, delta=0.0) == 0.0


def test_chance_p_value_uniform_ranks_not_significant_and_rank_one_is():
    rng = np.random.default_rng(0)
    null = [chance_p_value(rng.integers(1, 1001, 8).tolist(), 1000) for _ in range(400)]
    assert 0.03 < np.mean(np.array(null) < 0.05) < 0.08  # calibrated (uniform ranks are slightly conservative)
    assert chance_p_value([1] * 8, 1000) < 1e-10


def test_clopper_pearson_hand_computed():
    # k = 0: upper = 1 - (alpha/2)^(1/n); k = n: lower = (alpha/2)^(1/n)
    lo, hi = membership.clopper_pearson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 10))
    lo, hi = membership.clopper_pearson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** (1 / 10))
    lo, hi = membership.clopper_pearson(5, 10)
    # tabulated to 5 decimals: half a unit in the last place
    assert lo == pytest.approx(0.18709, abs=5e-6) and hi == pytest.approx(0.81291, abs=5e-6)
    with pytest.raises(ValueError):
        membership.clopper_pearson(3, 2)


def test_cp_epsilon_bound_hand_computed():
    # perfect attack on 20 + 20: FPR_hi = FNR_hi = 1 - 0.025^(1/20)
    u = 1 - 0.025 ** (1 / 20)
    c = membership.Confusion(tp=20, fn=0, fp=0, tn=20)
    assert membership.cp_epsilon_lower_bound(c, delta=1e-5) == pytest.approx(math.log((1 - 1e-5 - u) / u))
    # a coin-flip attack proves nothing
    assert membership.cp_epsilon_lower_bound(membership.Confusion(tp=10, fn=10, fp=10, tn=10), delta=1e-5) == 0.0


def test_threshold_attack_and_median():
    scores = [0.1, 0.2, 0.9, 1.0]
    members = [True, False, False, True]
    assert membership.median_threshold(scores) == pytest.approx(0.55)
    assert membership.threshold_attack(scores, members, 0.55) == membership.Confusion(tp=1, fn=1, fp=1, tn=1)


def test_one_run_bound_hand_computed():
    assert membership.one_run_guesses([0.1, 0.2, 0.8, 0.9], [True, True, False, False], k=1) == (2, 2)
    # all 10 guesses right: p_lo = 0.05^(1/10); eps = logit(p_lo)
    p = 0.05 ** (1 / 10)
    assert membership.one_run_epsilon_lower_bound(10, 10) == pytest.approx(math.log(p / (1 - p)))
    assert membership.one_run_epsilon_lower_bound(10, 5) == 0.0


def test_control_a_noise_is_at_least_100_times_too_small():
    assert broken_std(0.92) == pytest.approx(0.0092)
    assert broken_std(0.005) == pytest.approx(2.5e-5)  # the square, once it is the smaller
    noise = ReducedNoise(GaussianNoise(seed=0))
    draw = noise.normal((20000,), 1.0)
    assert np.std(draw) == pytest.approx(0.01, rel=0.05)  # 20,000 draws: standard error 0.5%, so 10 of them
    assert noise.asked == {1.0} and noise.drawn == {0.01}


def test_no_server_recheck_lets_an_oversized_update_through():
    from uedp.privacy.aggregation import aggregate

    tmpl = [np.zeros(4, dtype=np.float32)]
    big = [np.full(4, 10.0, dtype=np.float32)]  # norm 20 >> beta
    kw = {"template": tmpl, "w_max": 1.0, "beta": 0.5, "sigma": 0.0, "denominator": 1.0, "noise": GaussianNoise(seed=1)}
    checked, _ = aggregate([big], **kw)
    # the float32 release of a clipped sum (no noise): rounding ~1e-7 relative, inside rel 1e-5
    assert np.linalg.norm(checked[0]) == pytest.approx(0.5, rel=1e-5)
    unchecked, _ = unchecked_aggregate([big], **kw)
    assert np.linalg.norm(unchecked[0]) == pytest.approx(20.0, rel=1e-5)


def test_control_b_client_update_exceeds_beta(tmp_path):
    """The per-step-clip control (the real client round with the gradient hook and the unclipped bound
    injected) returns updates above beta (the audit's sensitivity is broken); the real client never does."""

    from client.update import ClientRound, client_update
    from runtime.local_grid import set_local_task_identity
    from tests.helpers import instructions, tiny_config
    from uedp.flower.mod import UeDPMod, bound_update
    from uedp.flower.mod import uedp_mod as _sound
    from uedp.models.base import get_weights
    from uedp.pipeline import new_model, prepare
    from uedp.privacy.clipping import update_norm

    set_local_task_identity()
    cfg = tiny_config(tmp_path, train={"lr": 2.0, "local_epochs": 3}, strategy={"name": "user_dp"})
    weights = get_weights(new_model(cfg, prepare(cfg), seed=0))
    ins, training = instructions(round=1, mechanism="user_dp", q_e=1.0, q_s=1.0, k_cap=0, m_max=6, slot=-1,
                                 beta=0.1, w_u=1.0, private=True, optimizer="sgd", lr=2.0, momentum=0.0,
                                 local_epochs=3, local_steps=None, batch_size=8, key=None, seed=-1)
    bound = UnclippedUpdate()
    new, metrics = ClientRound(gradient_hook=clip_each_step)(cfg, 0, weights, ins, training)
    broken = UeDPMod(bound=bound).update(ins, weights, [new])  # the control's mod
    good_new, _ = client_update(cfg, 0, weights, ins, training)
    good = _sound.update(ins, weights, [good_new])
    assert _sound.bound is bound_update
    assert update_norm(good) <= 0.1 * (1 + 1e-5)
    assert update_norm(broken) > 3 * 0.1 and metrics == {}  # private: the norm stays in the audit process
    # the same update, cast to the model's float32 for sending: each entry moves by at most 2^-24 relative
    assert bound.norms == [pytest.approx(update_norm(broken), rel=1e-6)]


def test_a_broken_component_is_injected_and_voids_the_claim(tmp_path):
    """Control (a) is an ordinary noise source handed to the server: it is used for the noise, and the
    run's summary says it is not private, with the control's warning."""
    from runtime.local_grid import run_local
    from server.setup import Components
    from tests.helpers import tiny_config

    noise = ReducedNoise(GaussianNoise(seed=0))
    cfg = tiny_config(tmp_path, strategy={"name": "user_dp"}, federation={"rounds": 1})
    s = run_local(cfg, components=Components(noise=noise, broken=noise.warning))
    (asked,), (drawn,) = noise.asked, noise.drawn
    # the summary's sigma is the one the server asks for; the drawn std is broken_std of it (same function)
    assert asked == pytest.approx(s["sigma"]) and drawn == pytest.approx(broken_std(s["sigma"]))
    assert not s["private"] and "BROKEN CONTROL" in s["warning"]


def test_quick_space_candidates_are_the_whole_rest_of_the_space():
    from uedp.audit.scoring import candidates_for

    cands = candidates_for({"space": "ddd", "secret": "042"}, 999, seed=0)
    assert len(cands) == len(set(cands)) == 999 and "042" not in cands
    assert all(len(c) == 3 and c.isdigit() for c in cands)
    sampled = candidates_for({"space": "dddd-dddd", "secret": "1234-5678"}, 50, seed=0)
    assert len(set(sampled)) == 50 and "1234-5678" not in sampled


def test_audit_synthetic_space_option_and_validation():
    from uedp.audit.canaries import load_audit_synthetic

    corpus = load_audit_synthetic(num_users=6, min_sentences=5, max_sentences=8, frequencies=[1, 2],
                                  per_frequency=4, copies=2, space="ddd")
    canaries = corpus.meta["audit_canaries"]
    assert len(canaries) == 8 and all(len(c["secret"]) == 3 and c["space"] == "ddd" for c in canaries)
    texts = corpus.split("train").column("text").to_pylist()
    for c in canaries:  # members appear copies * frequency times, non-members never
        assert texts.count(c["text"]) == (2 * c["frequency"] if c["member"] else 0)
    with pytest.raises(ValueError, match="space"):
        load_audit_synthetic(num_users=6, min_sentences=5, max_sentences=8, frequencies=[1], space="12d")


def _group(variant="user_dp", frequency=1, **kw):
    from uedp.audit.verdicts import GroupResult

    base = dict(variant=variant, frequency=frequency, kind="user" if frequency == 1 else "entity", members=5,
                non_members=11, exposure_mean=6.0, exposure_median=6.0, exposure_nonmember_mean=1.5,
                chance_p=1e-5, tpr=1.0, fpr=0.2, one_run="6/8", eps_lb_cp=0.0, eps_lb_one_run=0.0,
                eps_lb_rank=1.0, claimed_eps=8.0, violation=False)
    return GroupResult(**{**base, **kw})


def test_flag_rule_needs_significance_and_a_gap_or_a_violation():
    from uedp.audit.verdicts import flagged

    assert flagged([_group()])
    assert not flagged([_group(chance_p=0.01)])
    assert not flagged([_group(exposure_mean=3.0)])
    assert flagged([_group(chance_p=0.5, exposure_mean=1.0, violation=True)])


def test_a_leak_allowed_by_group_privacy_flags_only_against_a_sound_reference_that_does_not_leak():
    """User-level DP protects an entity held by f users only by group privacy (f * eps_user): its leak
    there is allowed, and is not a flag; a control leaking where its sound twin does not is flagged."""
    from uedp.audit.verdicts import GroupResult, Verdict, flagged, verdicts

    leak = _group("control_a", 32, exposure_mean=5.6, exposure_nonmember_mean=1.3)
    quiet = _group("user_dp_beta1", 32, chance_p=0.3, exposure_mean=1.4, exposure_nonmember_mean=1.3)
    assert leak.group_privacy and leak.leak and not quiet.leak
    assert not _group("uedp", 32).group_privacy and not _group("user_dp", 1).group_privacy
    twin_leaks = _group("user_dp_beta1", 32, exposure_mean=5.6, exposure_nonmember_mean=1.3)
    sound = _group("user_dp", 32, exposure_mean=5.6, exposure_nonmember_mean=1.3)
    assert not flagged([sound])  # sound user-level DP leaking a 32-user entity: allowed by its claim
    assert flagged([leak], reference=[quiet])  # a control leaking where its twin does not
    assert not flagged([leak], reference=[twin_leaks])  # both leak: the canaries cannot tell them apart
    assert flagged([_group("uedp", 32, exposure_mean=5.6, exposure_nonmember_mean=1.3)],
                   reference=[twin_leaks])  # a directly stated claim (eps_uedp)

    assert verdicts(["control_a", "user_dp_beta1"], [leak, quiet]) == {
        "control_a": Verdict(reference="user_dp_beta1", flagged=True),
        "user_dp_beta1": Verdict(reference=None, flagged=False)}
    assert verdicts(["control_a"], [leak]) == {  # twin not run: compared with chance
        "control_a": Verdict(reference="chance (user_dp_beta1 not run)", flagged=True)}
    again = GroupResult.from_dict(leak.to_dict())  # results.json round trip: derived fields recomputed
    assert again == leak and leak.to_dict()["leak"] and leak.to_dict()["group_privacy"]


def test_quick_config_makes_control_b_real(tmp_path):
    """Quick audit: client SGD (Adam is invariant to the per-step gradient scale, so the per-step clip of
    control (b) would change nothing) and a small beta (FedAvg's quick updates have norm ~0.6)."""
    from uedp.audit.config import audit_config

    cfg = audit_config(quick=True, variant="control_b", out_dir=tmp_path)
    assert cfg.train.optimizer == "sgd"
    assert cfg.privacy.beta <= 0.1
    assert cfg.strategy.name == "user_dp"
    assert 5 in cfg.dataset.option_dict()["frequencies"]


def test_control_a_runs_at_beta_one_beside_its_sound_twin(tmp_path):
    """Control (a) is audited at beta 1.0 (at 0.1 the clip alone prevents memorization and hides the
    defect), and `user_dp_beta1` is the same mechanism at the same beta with the correct noise."""
    from uedp.audit.config import audit_config

    for quick in (True, False):
        a = audit_config(quick=quick, variant="control_a", out_dir=tmp_path)
        twin = audit_config(quick=quick, variant="user_dp_beta1", out_dir=tmp_path)
        sound = audit_config(quick=quick, variant="user_dp", out_dir=tmp_path)
        assert a.privacy.beta == twin.privacy.beta == 1.0 and sound.privacy.beta <= 0.2
        assert a.strategy.name == twin.strategy.name == "user_dp"
        a.federation.out_dir = twin.federation.out_dir
        assert a == twin  # the pair differs only in the defect, which the audit switches on at run time
    assert sound.privacy.beta == RunConfig().privacy.beta  # the full audit: the main job's defaults


def test_private_tokenizer_control_is_uedp_with_the_private_split_tokenizer(tmp_path):
    """Every variant runs the default pipeline's (public) tokenizer; the private_tokenizer control is UeDP
    with tokenizer.source=private_split and nothing else changed, and `--set tokenizer.source` never undoes
    its defect."""
    from uedp.audit.config import audit_config
    from uedp.audit.variants import VARIANTS

    for quick in (True, False):
        control = audit_config(quick=quick, variant="private_tokenizer", out_dir=tmp_path)
        twin = audit_config(quick=quick, variant="uedp", out_dir=tmp_path)
        assert control.tokenizer.source == "private_split" and control.strategy.name == "uedp"
        assert VARIANTS["private_tokenizer"].reference == "uedp"
        control.tokenizer.source, control.federation.out_dir = twin.tokenizer.source, twin.federation.out_dir
        assert control == twin
        for name in VARIANTS:
            if name != "private_tokenizer":
                cfg = audit_config(quick=quick, variant=name, out_dir=tmp_path)
                assert (cfg.tokenizer.source, cfg.tokenizer.public_corpus) == ("public", "auto"), name
    over = {"tokenizer.source": "public"}
    assert audit_config(quick=True, variant="private_tokenizer", out_dir=tmp_path,
                        overrides=over).tokenizer.source == "private_split"
    assert audit_config(quick=True, variant="uedp", out_dir=tmp_path,
                        overrides={"tokenizer.source": "private_split"}).tokenizer.source == "private_split"


def test_private_tokenizer_leak_flags_it_against_uedp():
    """UeDP claims eps_uedp for entity canaries directly: a leak through the vocabulary flags the control,
    and its reference is the same mechanism with the public tokenizer."""
    from uedp.audit.verdicts import Verdict, verdicts

    leak = _group("private_tokenizer", 4, exposure_mean=6.9, exposure_nonmember_mean=1.8)
    quiet = _group("uedp", 4, chance_p=0.4, exposure_mean=1.5, exposure_nonmember_mean=1.4)
    assert not leak.group_privacy
    assert verdicts(["uedp", "private_tokenizer"], [quiet, leak]) == {
        "uedp": Verdict(reference=None, flagged=False),
        "private_tokenizer": Verdict(reference="uedp", flagged=True)}


def test_audit_overrides_reach_the_config_and_bad_keys_fail_before_training(tmp_path):
    """`--set KEY=VALUE` audits another configuration: mechanism keys and canary options both apply, to
    every variant; an unknown key or an attempt to change the variant's strategy is refused up front."""
    from studies.audit import check_request
    from uedp.audit.config import audit_config
    from uedp.errors import ConfigError

    over = {"privacy.q_u": 0.5, "dataset.options.copies": 3, "model.options.hidden_dim": 32}
    for variant in ("uedp", "user_dp", "control_a"):
        cfg = audit_config(quick=False, variant=variant, out_dir=tmp_path, overrides=over)
        assert cfg.privacy.q_u == 0.5 and cfg.model.option_dict()["hidden_dim"] == 32
        options = cfg.dataset.option_dict()
        assert options["copies"] == 3 and options["frequencies"] == [1, 2, 4, 8, 32]  # the rest is kept
    for bad in ("privacy.nope=1", "strategy.name=fedavg", "privacy.q_u=lots", "copies=3"):
        with pytest.raises(ConfigError):
            check_request(quick=False, variants=("uedp",), out=tmp_path / "never", settings=[bad])
    with pytest.raises(ConfigError, match="unknown variant"):
        check_request(quick=False, variants=("nope",), out=tmp_path / "never", settings=[])
    assert not (tmp_path / "never").exists()  # nothing ran, nothing was written


def test_reanalyse_rebuilds_verdicts_and_report_from_saved_results(tmp_path):
    """`--reanalyse` redoes the verdicts from results.json alone (no training): a sound user-level DP run
    leaking 32-user canaries is reported as allowed by group privacy; FedAvg's leak flags it."""
    import json

    from studies.audit import reanalyse, report

    def group(variant, freq, exposure, p):
        return {"variant": variant, "frequency": freq, "kind": "entity", "members": 5, "non_members": 11,
                "exposure_mean": exposure, "exposure_median": exposure, "exposure_nonmember_mean": 1.4,
                "chance_p": p, "tpr": 1.0, "fpr": 0.27, "one_run": "6/8", "eps_lb_cp": 0.0,
                "eps_lb_one_run": 0.0, "eps_lb_rank": 2.0, "claimed_eps": 256.0, "violation": False}

    run = {"sigma": 0.2, "eps_uedp": math.inf, "eps_user": 8.0, "final": {"perplexity": 500.0}, "seconds": 1}
    results = {"quick": False, "num_candidates": 9999, "delta": 1e-5, "seconds": 2, "command": "python -m x",
               "runs": {"fedavg": dict(run), "user_dp": dict(run)},
               "groups": [group("fedavg", 32, 5.7, 2e-5), group("user_dp", 32, 4.5, 5e-4)]}
    (tmp_path / "results.json").write_text(json.dumps(results))
    report(tmp_path, reanalyse(tmp_path), "python -m x")
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["runs"]["fedavg"]["flagged"] and not saved["runs"]["user_dp"]["flagged"]
    report = (tmp_path / "report.md").read_text()
    assert "Command: `python -m x`" in report and "leak (group privacy only)" in report
    assert (tmp_path / "exposure.png").stat().st_size > 0
