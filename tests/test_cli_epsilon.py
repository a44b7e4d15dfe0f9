"""`uedp epsilon`: JSON keys and values, the table, calibration, and exit status 2 on bad values."""

from __future__ import annotations

import json

import pytest

import uedp.cli
from uedp.privacy.accounting import epsilons_of, mechanism

BASE = ["epsilon", "--q-u", "0.05", "--q-e", "0.5", "--q-s", "0.1", "--m-max", "20", "--rounds", "50",
        "--num-users", "20"]  # N <= m_max: no truncation charge


@pytest.fixture(autouse=True)
def _only_this_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test this sub-command through the real dispatcher, independent of the other sub-commands."""
    monkeypatch.setattr(uedp.cli, "COMMANDS", ("uedp.commands.epsilon",))


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = uedp.cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_json_output(capsys) -> None:
    code, out, _ = run([*BASE, "--noise-multiplier", "2", "--k-cap", "3", "--beta", "0.5", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    for key in ("eps_uedp", "eps_user", "eps_undetected", "eps_rdp_bound", "noise_multiplier", "delta",
                "q_u", "q_e", "q_s", "m_max", "k_cap", "rounds", "beta", "w_max", "sigma"):  # fmt: skip
        assert key in data
    mech = mechanism("uedp", z=2.0, q_u=0.05, q_e=0.5, q_s=0.1, m_max=20, k_cap=3)
    expected = epsilons_of([(mech, 50)], num_users=20, delta=1e-5)
    # The very same computation: the command calls `epsilons_of` on this Mechanism (beta and w_max only scale
    # sigma, outside the units the accountant works in), and JSON writes a float's repr, which reads back
    # exactly. So the values are equal, not close.
    assert data["eps_uedp"] == expected.eps_uedp
    assert data["eps_user"] == expected.eps_user
    assert data["noise_multiplier"] == 2.0 and data["delta"] == 1e-5 and data["k_cap"] == 3
    assert data["sigma"] == pytest.approx(2.0 * (1 + 6) * 0.5)  # s_u = beta (docs/proofs.md Theorem 1); a product
    assert data["eps_undetected"] == expected.eps_undetected  # the same computation (above)
    assert data["undetected_rule"] == expected.undetected_bound and data["undetected_rule"]  # the JSON key kept
    assert data["claims"] == ["eps_uedp", "eps_undetected"] and data["delta_trunc"] == 0.0
    assert data["eps_user"] <= data["eps_uedp"] <= data["eps_rdp_bound"]


def test_table_output(capsys) -> None:
    code, out, _ = run([*BASE, "--noise-multiplier", "2"], capsys)
    assert code == 0
    for key in ("eps_uedp", "eps_user", "eps_undetected", "eps_rdp_bound", "noise multiplier z = 2"):
        assert key in out


def test_target_epsilon_prints_the_calibrated_z(capsys) -> None:
    code, out, _ = run([*BASE, "--target-epsilon", "5", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["target_epsilon"] == 5.0 and data["noise_multiplier"] > 0
    assert data["eps_uedp"] <= 5.0 and data["eps_undetected"] <= 5.0
    # z is calibrated to 1e-3 (absolute): epsilon sits below the target by up to |d eps / d z| 1e-3 (~1e-2 here)
    assert max(data["eps_uedp"], data["eps_undetected"]) == pytest.approx(5.0, abs=0.05)
    code, out, _ = run([*BASE, "--target-epsilon", "5"], capsys)
    assert code == 0 and "calibrated to eps_uedp and eps_undetected" in out


def test_target_on_one_epsilon_and_the_automatic_cap(capsys) -> None:
    """--target-on uedp calibrates eps_uedp alone; q_s = 1 then leaves eps_undetected above the target. With
    no --m-max the cap is the smallest whose truncation charge is at most 1% of delta."""
    argv = ["epsilon", "--q-u", "0.25", "--q-e", "0.2", "--q-s", "1", "--k-cap", "1", "--rounds", "30",
            "--num-users", "200", "--target-epsilon", "8", "--json"]
    code, out, _ = run([*argv, "--target-on", "uedp"], capsys)
    data = json.loads(out)
    assert code == 0 and data["m_max"] == 89 and 0.0 < data["delta_trunc"] <= 1e-7
    # z calibrated to 1e-3: as in the test above
    assert data["eps_uedp"] == pytest.approx(8.0, abs=0.05) and data["eps_undetected"] > 8.5
    assert data["claims"] == ["eps_uedp"]
    code, out, _ = run(argv, capsys)
    both = json.loads(out)
    assert both["eps_undetected"] <= 8.0 and both["eps_uedp"] < 8.0
    assert both["noise_multiplier"] > data["noise_multiplier"]
    code, _, err = run([*argv, "--target-on", "user"], capsys)
    assert code == 2 and "target_on" in err


@pytest.mark.parametrize(
    "extra",
    [
        ["--delta", "1.5"],
        ["--delta", "0"],
        ["--delta", "0.01", "--num-users", "100"],  # delta must be below 1/N
    ],
)
def test_bad_delta_exits_2(extra, capsys) -> None:
    code, out, err = run([*BASE, "--noise-multiplier", "2", *extra, "--json"], capsys)
    assert code == 2 and out == "" and "delta" in err


@pytest.mark.parametrize(
    "extra,option",
    [
        (["--noise-multiplier", "0"], "noise multiplier"),
        (["--noise-multiplier", "2", "--q-e", "1.5"], "q_e"),
        (["--noise-multiplier", "2", "--k-cap", "0"], "k_cap"),
        (["--noise-multiplier", "2", "--w-max", "2"], "w_max"),
        (["--target-epsilon", "-1"], "target"),
    ],
)
def test_bad_values_exit_2(extra, option, capsys) -> None:
    code, _, err = run([*BASE, *extra], capsys)
    assert code == 2 and option in err


def test_noise_options_are_exclusive_and_required(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        uedp.cli.main(BASE)
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        uedp.cli.main([*BASE, "--noise-multiplier", "1", "--target-epsilon", "3"])


USER = ["epsilon", "--strategy", "user_dp", "--q-u", "0.2", "--rounds", "5", "--num-users", "100"]


def test_holders_for_user_level_dp_json(capsys) -> None:
    """--strategy user_dp --holders: eps_user at K = 0, growing in K, each row the library's value."""
    from uedp.privacy.holders import holders_epsilon

    code, out, _ = run([*USER, "--noise-multiplier", "4", "--holders", "0,2", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["strategy"] == "user_dp" and "eps_uedp" not in data and data["q_e"] == data["q_s"] == 1.0
    rows = {r["k"]: r for r in data["holders"]}
    assert rows[0]["epsilon"] == data["eps_user"] and rows[0]["bound"] == "user"  # the same call: equal
    mech = mechanism("user_dp", z=4.0, q_u=0.2, m_max=None)
    want = holders_epsilon([(mech, 5)], 2, delta=1e-5, num_users=100)
    assert rows[2]["epsilon"] == want.epsilon > data["eps_user"] and rows[2]["bound"] == want.bound
    assert rows[2]["detected"] is None  # user-level DP samples no entity: one column


def test_uedp_table_has_a_detected_column(capsys) -> None:
    code, out, _ = run([*BASE, "--noise-multiplier", "3", "--holders", "0"], capsys)  # K = 0: eps_user, quick
    assert code == 0 and "held by K other users" in out and "detected" in out


def test_missed_adds_the_mixed_case(capsys) -> None:
    """--missed K': a JSON row per K with the mixed epsilon, the library's value, between the detected and
    the undetected one."""
    from uedp.privacy.holders import holders_epsilon

    code, out, _ = run([*BASE, "--noise-multiplier", "3", "--holders", "2", "--missed", "1", "--json"], capsys)
    assert code == 0, out
    row = json.loads(out)["holders"][0]
    mech = mechanism("uedp", z=3.0, q_u=0.05, q_e=0.5, q_s=0.1, m_max=20)
    want = holders_epsilon([(mech, 50)], 2, delta=1e-5, num_users=20, missed=1)
    assert row["missed"] == 1 and row["mixed"] == pytest.approx(want.epsilon, rel=1e-12)
    assert row["mixed_bound"] == want.bound and row["detected"] <= row["mixed"] <= row["epsilon"]
    code, out, _ = run([*BASE, "--noise-multiplier", "3", "--holders", "0", "--missed", "0"], capsys)  # quick
    assert code == 0 and "0 missed" in out


def test_holders_options_are_checked(capsys) -> None:
    for argv, words in (([*BASE, "--noise-multiplier", "3", "--holders", "1", "--missed", "2"], "--missed"),
                        ([*BASE, "--noise-multiplier", "3", "--missed", "1"], "--missed"),
                        ([*USER, "--noise-multiplier", "4", "--holders", "2", "--missed", "1"], "--missed"),
                        ([*USER, "--noise-multiplier", "4", "--q-e", "0.5"], "UeDP's"),
                        ([*USER, "--noise-multiplier", "4", "--holders", "x"], "--holders"),
                        ([*USER, "--noise-multiplier", "4", "--target-holders", "2"], "--target-epsilon"),
                        (["epsilon", "--q-u", "0.2", "--rounds", "5", "--num-users", "100", "--noise-multiplier", "4"],
                         "--q-e and --q-s")):
        code, _, err = run(argv, capsys)
        assert code == 2 and words in err, (argv, err)


@pytest.mark.e2e  # a calibration of the holders' epsilon: ~20 s
def test_target_holders_calibrates_the_holders_epsilon(capsys, monkeypatch, tmp_path) -> None:
    """--target-holders K: the K-holder epsilon is <= the target at the z found and above it 1e-3 lower."""
    from uedp.privacy.holders import holders_epsilon

    monkeypatch.setenv("UEDP_CALIBRATION_CACHE", "off")
    code, out, _ = run([*USER, "--target-epsilon", "4", "--target-holders", "1", "--holders", "1", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["holders"][0]["epsilon"] <= 4.0 < data["holders"][0]["epsilon"] * 2
    z = data["noise_multiplier"]
    below = holders_epsilon([(mechanism("user_dp", z=z - 1e-3, q_u=0.2, m_max=None), 5)], 1, delta=1e-5,
                            num_users=100)
    assert below.epsilon > 4.0  # the smallest z to tol 1e-3 (uedp.privacy.calibration's guarantee)
    assert data["eps_user"] < 4.0  # the user claim alone would have allowed less noise
