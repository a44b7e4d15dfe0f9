"""The public accounting API of uedp.privacy (dp-accounting's shape: rounds are data, epsilon is computed from
them; calibration takes the rounds as a function of z), checked against dp-accounting computed directly, and
the rule that no code outside uedp.privacy uses a private (underscored) name of it."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import dp_accounting
import pytest

from uedp.errors import ConfigError
from uedp.privacy import accounting, calibration, composition, pairs
from uedp.privacy.accounting import (
    Mechanism,
    epsilon_and_bound,
    epsilon_of,
    epsilons_of,
    rdp_epsilon_of,
)
from uedp.privacy.calibration import calibrate, calibrate_epsilon_function, clear_caches
from uedp.privacy.composition import pairs_epsilon, pairs_rdp_epsilon, undetected_bound
from uedp.privacy.ledger import Ledger, RoundRecord
from uedp.privacy.pairs import UNDETECTED_FREE, UNDETECTED_WITH_ENTITIES
from uedp.privacy.sensitivity import sensitivities

ROOT = Path(__file__).resolve().parents[1]
DELTA = 1e-5


# -- no private name of uedp.privacy outside it ---------------------------------------------------------------
PACKAGE = "uedp.privacy"
PRIVACY_MODULES = frozenset(p.stem for p in (ROOT / "uedp" / "privacy").glob("*.py") if p.stem != "__init__")
# Known uses that need a public hook in a module this change does not own: the registry fixture of
# test_mechanism_vocabulary.py swaps uedp.privacy.mechanisms' registry dicts for one test (a public scoped
# registration, e.g. a `mechanisms.registered(spec)` context manager, would replace it). Nothing else.
ALLOWED = frozenset({
    ("tests/test_mechanism_vocabulary.py", "uedp.privacy.mechanisms._SPECS"),
    ("tests/test_mechanism_vocabulary.py", "uedp.privacy.mechanisms._BY_CONFIG"),
})  # fmt: skip
PATCH_TARGET = re.compile(r"\buedp\.privacy(?:\.[a-z_]+)*\._[A-Za-z]\w*")
ATTRIBUTE_CALLS = ("getattr", "setattr", "delattr", "hasattr", "object")  # getattr(m, "_x"), mock.patch.object


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_privacy(dotted: str | None) -> bool:
    return dotted is not None and (dotted == PACKAGE or dotted.startswith(PACKAGE + "."))


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, "uedp.privacy.<module>.<_name>") for every import of, attribute access to, getattr/setattr/
    mock.patch.object of, or patch target string naming an underscored name of uedp.privacy or one of its
    modules, however the module was imported (`import uedp.privacy.x as m`, `from uedp.privacy import x`,
    `from uedp import privacy`, the full dotted path). Dunder names (`__file__`) are public."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}  # a local name -> the uedp.privacy module (or package) it is bound to
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                local = alias.asname or alias.name
                if _is_privacy(node.module):
                    if _private(alias.name):
                        found.append((node.lineno, f"{node.module}.{alias.name}"))
                    elif node.module == PACKAGE and alias.name in PRIVACY_MODULES:
                        aliases[local] = f"{PACKAGE}.{alias.name}"
                elif node.module == "uedp" and alias.name == "privacy":
                    aliases[local] = PACKAGE
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is_privacy(alias.name) and alias.asname:
                    aliases[alias.asname] = alias.name

    def dotted(expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Name):
            return aliases.get(expr.id, expr.id)
        if isinstance(expr, ast.Attribute):
            base = dotted(expr.value)
            return None if base is None else f"{base}.{expr.attr}"
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = dotted(node.value)
            if _is_privacy(base):
                found.append((node.lineno, f"{base}.{node.attr}"))
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            target, name = node.args[0], node.args[1]
            if (fn in ATTRIBUTE_CALLS and isinstance(name, ast.Constant) and isinstance(name.value, str)
                    and _private(name.value) and _is_privacy(dotted(target))):
                found.append((node.lineno, f"{dotted(target)}.{name.value}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [(node.lineno, m.group(0)) for m in PATCH_TARGET.finditer(node.value)]
    return sorted(set(found))


def _sources() -> list[Path]:
    """Every .py file of the project outside uedp/privacy (no hidden folder: .venv, .git), but this one (its
    checks of the scanner spell private names on purpose)."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if any(part.startswith(".") for part in rel.parts) or rel.parts[:2] == ("uedp", "privacy"):
            continue
        if path.resolve() != Path(__file__).resolve():
            out.append(path)
    return out


def test_the_scanner_finds_every_form_of_private_use():
    snippets = {
        "from uedp.privacy.accounting import _pld_epsilon, epsilon": ["uedp.privacy.accounting._pld_epsilon"],
        "from uedp.privacy import _WHERE": ["uedp.privacy._WHERE"],
        "from uedp.privacy import accounting as acc\nacc._rdp_epsilon.cache_clear()":
            ["uedp.privacy.accounting._rdp_epsilon"],
        "import uedp.privacy.calibration as cal\ncal._finish(f, 1, 1, 1, 1)": ["uedp.privacy.calibration._finish"],
        "import uedp.privacy.accounting\nuedp.privacy.accounting._pair_pld": ["uedp.privacy.accounting._pair_pld"],
        "from uedp import privacy\nprivacy.accounting._pld_epsilon": ["uedp.privacy.accounting._pld_epsilon"],
        "from uedp.privacy import mechanisms\nmonkeypatch.setattr(mechanisms, '_SPECS', {})":
            ["uedp.privacy.mechanisms._SPECS"],
        "mock.patch('uedp.privacy.accounting._pld_epsilon')": ["uedp.privacy.accounting._pld_epsilon"],
        # public names, dunders, other packages' private names, a local variable named like a module
        "from uedp.privacy import accounting\naccounting.epsilon_of\naccounting.__file__": [],
        "from uedp.audit.bounds import _bounds_vector\nfrom uedp.privacy.accounting import epsilon": [],
        "accounting = object()\naccounting._x": [],
    }
    for source, want in snippets.items():
        assert [name for _, name in private_uses(source)] == want, source


def test_no_code_outside_uedp_privacy_uses_its_private_names():
    """The accounting is used through its public API (uedp.privacy.accounting's module docstring) by every
    caller: the audit, the studies, the commands and the tests (a private name is free to change)."""
    offenders = []
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        for line, name in private_uses(path.read_text(encoding="utf-8")):
            if (rel, name) not in ALLOWED:
                offenders.append(f"{rel}:{line}: {name}")
    assert not offenders, "private names of uedp.privacy used outside it:\n" + "\n".join(offenders)


def test_every_exported_name_is_public_and_resolves():
    import uedp.privacy as privacy

    for name in privacy.__all__:
        assert not _private(name) and getattr(privacy, name) is not None
    for name in ("epsilon_of", "rdp_epsilon_of", "epsilons_of", "pairs_epsilon", "pairs_rdp_epsilon",
                 "undetected_bound", "Adjacency", "calibrate", "calibrate_epsilon_function", "clear_caches"):
        assert name in privacy.__all__
    assert len(privacy.__all__) <= 25
    documented = (ROOT / "docs" / "privacy-accounting.md").read_text(encoding="utf-8")
    assert not [n for n in privacy.__all__ if f"`{n}`" not in documented and f"{n}(" not in documented]


def test_adjacencies_and_rules_format_as_their_values():
    """StrEnums: f-strings, JSON and dict keys see the plain value (summary.json, MetricRecord keys)."""
    import json

    from uedp.privacy import Adjacency, Rule

    assert f"eps_{Adjacency.UEDP}" == "eps_uedp" and json.dumps({Adjacency.USER: Rule.USER_DP}) == '{"user": "user_dp"}'
    assert {"uedp": 1}[Adjacency.UEDP] == 1 and Rule("uedp_split") is Rule.UEDP_SPLIT


# -- epsilon_of against dp-accounting ----------------------------------------------------------------------------
N = 40  # public places; m_max = 25 with q_u <= 0.2: truncation is charged but small (delta_trunc < 1e-6)


def _record(t: int, *, rule: str, z: float, q_u: float, q_e: float, q_s: float, m_max: int | None,
            k_cap: int | None) -> RoundRecord:
    return RoundRecord(round=t, rule=rule, q_u=q_u, q_e=q_e, q_s=q_s, m_max=m_max, k_cap=k_cap, beta=0.5,
                       w_max=0.8, z=z, denominator=3.0)


def _ledger() -> Ledger:
    """7 rounds: three of UeDP with the entity cap, two of UeDP without it (a larger z), two of f_E."""
    ledger = Ledger(delta=DELTA, num_users=N)
    for t in range(1, 8):
        if t <= 3:
            params = dict(rule="uedp", z=1.0, q_u=0.2, q_e=0.3, q_s=0.2, m_max=25, k_cap=2)
        elif t <= 5:
            params = dict(rule="uedp", z=3.0, q_u=0.1, q_e=0.2, q_s=0.2, m_max=25, k_cap=None)
        else:
            params = dict(rule="uedp_naive", z=1.2, q_u=0.2, q_e=0.5, q_s=0.0, m_max=25, k_cap=1)
        ledger.append(_record(t, **params))
    return ledger


def _dp_event(record: RoundRecord, adjacency: str) -> dp_accounting.DpEvent:
    """The record's round as dp-accounting's event, from docs/mechanism.md (section 4) directly: the noise std
    is the ledger's sigma, the shifts are uedp.privacy.sensitivity's, both in units of w_max * beta."""
    unit = record.w_max * record.beta
    sens = sensitivities(beta=record.beta, w_max=record.w_max, m_max=record.m_max, k_cap=record.k_cap,
                         rule=record.rule)
    sigma, s_u, s_e, q_u, q_e = record.sigma / unit, sens.s_u / unit, sens.s_e / unit, record.q_u, record.q_e
    if adjacency == "user":
        return dp_accounting.PoissonSampledDpEvent(q_u, dp_accounting.GaussianDpEvent(sigma / s_u))
    return dp_accounting.dp_event.MixtureOfGaussiansDpEvent(
        sigma, [0.0, s_u, s_e, s_u + s_e], [(1 - q_u) * (1 - q_e), q_u * (1 - q_e), (1 - q_u) * q_e, q_u * q_e])


def test_epsilon_of_a_ledger_is_dp_accountings_pld_accountant_on_the_same_events():
    """epsilon_of(ledger.runs(), adjacency) against dp-accounting's PLDAccountant (ADD_OR_REMOVE_ONE, the
    same grid) composing one event per round, at delta - delta_trunc (the truncation charge, which
    dp-accounting does not know about, computed independently as 1 - prod(1 - P(Bin(N-2, q_u) >= m_max-1))).

    Tolerance, from how both are computed: both build each distinct round's PLD with the same dp-accounting
    constructor (from_mixture_gaussian_mechanism, or from_gaussian_mechanism with sampling_prob for the
    user pair) on the same grid, but (i) the accountant composes round by round from the identity PLD where
    we self-compose each run of identical rounds once, then compose the runs, and (ii) our mixture
    components are merged and sorted (here in the events' order already). Each composition truncates tail
    mass <= 1e-15 to infinite loss (dp-accounting's tail_mass_truncation) and its FFT rounds each mass by
    ~1e-16 of the largest (~1e-14 on a delta summed over the grid): a BUDGET of 2e-14 on delta per
    composition, counted generously (one per round of the accountant's, two per run of ours: 13). delta(eps)
    moving by D moves eps by D / |d delta / d eps|, measured on the accountant's own curve (d ln delta /
    d eps between eps and eps + 0.01): a tolerance of ~2e-9 relative here. Measured: 3e-12 (uedp) and 7e-12
    (user) relative."""
    from scipy.stats import binom

    ledger = _ledger()
    records, runs = ledger.records, ledger.runs()
    assert [c for _, c in runs] == [3, 2, 2]  # consecutive identical rounds form one run
    trunc = 1.0 - math.prod(1.0 - float(binom.sf(r.m_max - 2, N - 2, r.q_u)) for r in records)
    assert 0.0 < trunc < 1e-6
    vdi = 2.0**-7
    compositions = len(records) + 2 * len(runs)
    for adjacency in ("uedp", "user"):
        ours = epsilon_of(runs, adjacency, delta=DELTA, num_users=N, value_discretization_interval=vdi)
        acc = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                              value_discretization_interval=vdi)  # fmt: skip
        for record in records:
            acc.compose(_dp_event(record, adjacency), 1)
        theirs = acc.get_epsilon(DELTA - trunc)
        assert 0.1 < theirs < 50.0
        slope = math.log((DELTA - trunc) / acc.get_delta(theirs + 0.01)) / 0.01  # -d ln(delta) / d eps there
        assert slope > 0.1
        tolerance = compositions * 2e-14 / DELTA / slope  # BUDGET per composition, as an epsilon
        assert abs(ours - theirs) <= tolerance, (adjacency, ours, theirs, tolerance)


def test_the_runs_functions_are_the_pairs_functions_on_the_runs_pairs():
    """Bit for bit (the very computation: epsilon_of is pairs_epsilon on the runs' pairs at delta -
    delta_trunc), and the ledger and epsilon_of agree exactly for the same reason."""
    ledger = _ledger()
    runs = ledger.runs()
    d = DELTA - accounting.truncation_delta(runs, N)
    for adjacency in ("uedp", "user"):
        pairs = [(m.mixture(adjacency), c) for m, c in runs]
        assert epsilon_of(runs, adjacency, delta=DELTA, num_users=N) == pairs_epsilon(pairs, delta=d)
        assert rdp_epsilon_of(runs, adjacency, delta=DELTA, num_users=N) == pairs_rdp_epsilon(pairs, delta=d)
    candidates = [{b: [(m.undetected(b), c) for m, c in runs] for b in bounds}
                  for bounds in (UNDETECTED_FREE, UNDETECTED_WITH_ENTITIES)]
    assert epsilon_and_bound(runs, "undetected", delta=DELTA, num_users=N) == undetected_bound(candidates, delta=d)
    assert ledger.epsilons() == epsilons_of(runs, delta=DELTA, num_users=N).as_dict()
    assert epsilon_of(runs, "undetected", delta=DELTA, num_users=N) == ledger.epsilons()["eps_undetected"]


def test_the_public_api_validates_its_arguments():
    ledger = _ledger()
    runs = ledger.runs()
    with pytest.raises(ValueError, match="adjacency must be one of uedp, user, undetected, got 'kind'"):
        epsilon_of(runs, "kind", delta=DELTA, num_users=N)
    with pytest.raises(ValueError, match="got 'undetected'"):
        rdp_epsilon_of(runs, "undetected", delta=DELTA, num_users=N)
    with pytest.raises(TypeError, match=r"\(Mechanism, count\) runs \(a ledger's are Ledger.runs\(\)\)"):
        epsilon_of(ledger.records, "uedp", delta=DELTA, num_users=N)  # records, not runs
    with pytest.raises(TypeError, match="Mechanism"):
        epsilon_of([("uedp", 3)], "uedp", delta=DELTA, num_users=N)
    with pytest.raises(ConfigError, match="round count"):
        epsilon_of([(runs[0][0], -1)], "uedp", delta=DELTA, num_users=N)
    with pytest.raises(ConfigError, match="number of places"):  # truncation needs N
        epsilon_of(runs, "uedp", delta=DELTA, num_users=None)
    with pytest.raises(TypeError, match="NumericPair pair, got Mechanism"):
        pairs_epsilon([(ledger.records[0].mechanism, 3)], delta=DELTA)
    with pytest.raises(ConfigError, match="delta"):
        pairs_epsilon([(ledger.records[0].mechanism.mixture("uedp"), 3)], delta=0.0)
    with pytest.raises(ValueError, match="at least one candidate"):
        undetected_bound([{}], delta=DELTA)
    mixture = ledger.records[0].mechanism.mixture("uedp")
    assert pairs_epsilon([(mixture, 0)], delta=DELTA) == 0.0  # zero rounds: nothing spent


# -- calibration: runs as a function of z -------------------------------------------------------------------
def _two_mechanisms(z: float) -> list[tuple[Mechanism, int]]:
    """6 rounds of UeDP (entity cap 2) then 4 of f_E (no S, cap 1) at noise multiplier z: a ledger mixing two
    mechanisms, with a truncation charge (N = 40 places, m_max 25)."""
    uedp = dict(rule="uedp", q_u=0.2, q_e=0.3, q_s=0.5, m_max=25, k_cap=2)
    naive = dict(rule="uedp_naive", q_u=0.15, q_e=0.4, q_s=0.0, m_max=25, k_cap=1)
    ledger = Ledger(delta=DELTA, num_users=N)
    for t in range(1, 11):
        ledger.append(_record(t, z=z, **(uedp if t <= 6 else naive)))
    return ledger.runs()


def test_calibrate_meets_the_guarantee_on_runs_from_z_with_two_mechanisms():
    """eps(z*) <= target < eps(z* - tol) with eps the max over the adjacencies of epsilon_of(runs(z))
    (the values a ledger of these rounds reports); the same z, within tol, as the search for any epsilon
    function run on that max."""
    target, tol, vdi = 3.0, 1e-3, 0.02
    adjacencies = ("uedp", "undetected")

    def eps(z: float, adjacency: str) -> float:
        return epsilon_of(_two_mechanisms(z), adjacency, delta=DELTA, num_users=N, value_discretization_interval=vdi)

    z = calibrate(_two_mechanisms, target, adjacencies, delta=DELTA, num_users=N, tol=tol,
                  value_discretization_interval=vdi)
    assert all(eps(z, a) <= target for a in adjacencies)
    assert max(eps(z - tol, a) for a in adjacencies) > target
    z_any = calibrate_epsilon_function(lambda zz: max(eps(zz, a) for a in adjacencies), target, tol=tol)
    assert abs(z_any - z) < tol
    z_user = calibrate(_two_mechanisms, target, "user", delta=DELTA, num_users=N, tol=tol,
                       value_discretization_interval=vdi)
    assert z_user < z and eps(z_user, "user") <= target < eps(z_user - tol, "user")
    with pytest.raises(ConfigError, match="adjacencies must be one or more of"):
        calibrate(_two_mechanisms, target, ("uedp", "kind"), delta=DELTA, num_users=N)
    with pytest.raises(ConfigError, match="number of places"):
        calibrate(_two_mechanisms, target, "uedp", delta=DELTA, num_users=None)


def test_calibrate_epsilon_function_from_its_own_start():
    """No guess: the log-log search from z = 1, then the finish that proves the guarantee (also on a curve
    that is not monotone, and on one that is already below the target at z = 1)."""
    tol = 1e-3
    for target in (0.5, 2.0, 8.0, 200.0):
        for curve in (lambda z: 8.0 * z**-1.5, lambda z: 8.0 * z**-1.5 * (1.0 + 0.01 * math.sin(2000.0 * z))):
            z = calibrate_epsilon_function(curve, target, tol=tol)
            assert curve(z) <= target < curve(z - tol)
    with pytest.raises(ConfigError, match="not reachable"):
        calibrate_epsilon_function(lambda z: math.inf, 1.0)
    with pytest.raises(ConfigError, match="tolerance"):
        calibrate_epsilon_function(lambda z: 1.0 / z, 1.0, tol=0.0)


def test_clear_caches_empties_every_cache_of_the_accounting():
    epsilon_of(_ledger().runs(), "uedp", delta=DELTA, num_users=N, value_discretization_interval=0.02)

    def caches():
        return {f"{m.__name__}.{name}": obj.cache_info().currsize for m in (accounting, composition, pairs, calibration)
                for name, obj in vars(m).items() if hasattr(obj, "cache_info") and obj.__module__ == m.__name__}

    before = caches()
    assert len(before) >= 5 and sum(before.values()) > 0
    clear_caches()
    assert set(caches().values()) == {0}, caches()
