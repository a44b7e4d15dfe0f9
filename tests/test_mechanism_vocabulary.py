"""One vocabulary of mechanisms: summary.json's "method", the crafted-update audit and the
config's local check all read uedp.privacy.mechanisms.MechanismSpec, and an unregistered name is refused."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from uedp.audit import scenario as audit
from uedp.audit.law import realizable_law
from uedp.audit.mechanism import build_mechanism
from uedp.audit.scenario import AuditSetting, Scenario
from uedp.config import RunConfig
from uedp.errors import ConfigError
from uedp.privacy import mechanisms
from uedp.privacy.mechanisms import MechanismSpec, get, summary_methods
from uedp.privacy.noise import GaussianNoise
from uedp.privacy.sensitivity import RULES

ROOT = Path(__file__).resolve().parents[1]
SMALL = AuditSetting(name="small", num_users=20, q_u=0.3, m_max=8, rounds=3)


@pytest.fixture
def registry(monkeypatch):
    """Register specs for one test only (the registry is restored afterwards)."""
    monkeypatch.setattr(mechanisms, "_SPECS", dict(mechanisms._SPECS))
    monkeypatch.setattr(mechanisms, "_BY_CONFIG", dict(mechanisms._BY_CONFIG))

    def add(spec: MechanismSpec, *, replace: bool = False) -> MechanismSpec:
        if replace:
            mechanisms._SPECS[spec.name] = spec
            mechanisms._BY_CONFIG[(spec.strategy, spec.estimator)] = spec
            return spec
        return mechanisms.register(spec)

    return add


# -- summary.json's "method" -------------------------------------------------------------------------------------
def test_every_summary_method_is_a_registered_specs():
    assert summary_methods() == ("uedp", "uedp_naive", "uedp_split", "user_dp", "noiseless", "local_dp")
    for spec in mechanisms.specs():
        # a central mechanism's summary says its accounting rule (the ledger's "method"), a local one its own name
        assert spec.summary_method == (spec.rule if not spec.local else "local_dp")
        assert (spec.summary_method in RULES) != spec.local


def test_a_local_mechanism_must_register_its_summary_method():
    dp_bart = get("dp_bart")
    with pytest.raises(ValueError, match="summary method"):
        dataclasses.replace(dp_bart, summary_method="")  # would say "noiseless": a central method
    with pytest.raises(ValueError, match="summary method"):
        dataclasses.replace(get("uedp"), summary_method="local_dp")  # a central one says its accounting rule


def test_summary_writers_take_the_method_from_the_spec():
    """No writer spells a method: every "method" summary.json carries is a spec's `summary_method`."""
    literal = re.compile(r"""["']method["']\s*:\s*["']""")
    for folder in ("server", "runtime", "studies", "experiments", "strategies", "client"):
        for path in (ROOT / folder).rglob("*.py"):
            assert not literal.search(path.read_text()), f"{path.relative_to(ROOT)} writes a literal method"


def _summary_methods(obj, out: set[str]) -> set[str]:
    if isinstance(obj, dict):
        if "strategy" in obj and "method" in obj:
            out.add(obj["method"])
        for v in obj.values():
            _summary_methods(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _summary_methods(v, out)
    return out


def test_recorded_summaries_carry_registered_methods():
    """The committed results (docs/figures) and the fingerprint's summaries: every method is registered."""
    seen: set[str] = set()
    for path in sorted((ROOT / "docs" / "figures").glob("*.json")):
        _summary_methods(json.loads(path.read_text()), seen)
    assert {"local_dp", "noiseless", "uedp", "user_dp"} <= seen  # the DP-BART study's rows
    fingerprint = json.loads((ROOT / "tests" / "assets" / "fingerprint.json").read_text())
    seen |= set(re.findall(r'"method": "([^"]+)"', json.dumps(fingerprint)))
    assert seen <= set(summary_methods())


# -- the crafted-update audit -------------------------------------------------------------------------------------
def test_the_audits_methods_are_registered_specs():
    assert set(audit.METHODS) == {"uedp", "user_dp"} == {s.name for s in mechanisms.specs() if s.audited}
    for name in audit.METHODS:
        sc = Scenario(SMALL, name, "user")
        spec = get(name)
        assert sc.spec is spec and sc.rule == spec.rule and sc.keyed == spec.keyed
        assert (sc.m_max, sc.k_cap, sc.rates) == (spec.m_max(SMALL), spec.k_cap(SMALL), spec.rates(SMALL))
        assert SMALL.claims(name) == spec.claims
    with pytest.raises(ConfigError, match="unknown mechanism"):
        Scenario(SMALL, "dp_sgd", "user")
    for name in ("fedavg", "dp_bart", "uedp_split"):  # registered, not covered by the audit's law
        with pytest.raises(ConfigError, match="does not cover"):
            Scenario(SMALL, name, "user")
    with pytest.raises(ValueError, match="user_dp is audited for adjacencies user"):
        Scenario(SMALL, "user_dp", "uedp")  # user-level DP claims no entity epsilon
    with pytest.raises(ValueError, match="zero design"):
        Scenario(SMALL, "user_dp", "user", "full")  # unkeyed: no entity coin to flip
    with pytest.raises(ValueError, match="audit's law"):
        dataclasses.replace(get("fedavg"), audited=True)


def test_the_audit_reads_the_spec_not_the_name(registry):
    twin = registry(dataclasses.replace(get("uedp"), name="uedp_twin", strategy="uedp_twin", estimator=None))
    assert Scenario(SMALL, "uedp_twin", "uedp").spec is twin
    for adjacency in ("uedp", "undetected"):
        assert realizable_law(Scenario(SMALL, "uedp_twin", adjacency)) == realizable_law(
            Scenario(SMALL, "uedp", adjacency))
    a, b = (build_mechanism(Scenario(SMALL, n, "uedp"), z=1.0, noise=GaussianNoise(seed=0)) for n in
            ("uedp", "uedp_twin"))
    assert (a.sigma, a.denominator, a.claimed_epsilon) == (b.sigma, b.denominator, b.claimed_epsilon)
    # the same spec without truncation, cap and keying: audited as user-level DP is (no m_max, no slots)
    flat = registry(dataclasses.replace(get("user_dp"), name="user_twin", strategy="user_twin"))
    sc = Scenario(SMALL, flat.name, "user")
    assert (sc.m_max, sc.k_cap, sc.keyed) == (None, None, False)
    assert realizable_law(sc) == realizable_law(Scenario(SMALL, "user_dp", "user"))


# -- the config's local check -------------------------------------------------------------------------------------
def test_the_configs_local_check_follows_the_spec(registry):
    bad = {"rewrite": {"variant": "bogus"}}
    with pytest.raises(ConfigError, match="rewrite variant"):
        RunConfig.from_nested({"strategy": {"name": "dp_bart"}, **bad})
    RunConfig.from_nested({"strategy": {"name": "uedp"}, **bad})  # rewrite.* is not read: not checked
    # a local mechanism under another name is checked; dp_bart registered central is not
    registry(dataclasses.replace(get("dp_bart"), name="local_twin", strategy="local_twin"))
    with pytest.raises(ConfigError, match="rewrite variant"):
        RunConfig.from_nested({"strategy": {"name": "local_twin"}, **bad})
    registry(dataclasses.replace(get("dp_bart"), local=False, summary_method=""), replace=True)
    RunConfig.from_nested({"strategy": {"name": "dp_bart"}, **bad})
