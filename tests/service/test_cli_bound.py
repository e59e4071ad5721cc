"""``bandit bound guardrail``: Theorem 1's bound from the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bandit_core.bounds import guardrail_regret_bound
from service.cli import main

SEED_EXAMPLE = [
    "bound",
    "guardrail",
    "--d",
    "128",
    "--T",
    "1e6",
    "--delta-g",
    "0.01",
    "--r-max",
    "100",
]


def test_prints_the_corrected_seed_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(SEED_EXAMPLE) == 0
    out = capsys.readouterr().out
    assert "d=128  T=1000000  delta_G=0.01  R_max=100  alpha=1  L=1" in out
    assert "LinUCB term     2*alpha*sqrt(2*T*d*log(1 + T*L^2/d)) = 95,805.71" in out
    assert "guardrail term  delta_G*T*R_max                      = 1,000,000.00" in out
    assert "bound R(T) <=                                          1,095,805.71" in out
    assert "per round       bound / T                            = 1.09581" in out


def test_json_output_equals_the_library(tmp_path: Path) -> None:
    path = tmp_path / "bound.json"
    assert (
        main(
            SEED_EXAMPLE[:2]
            + [
                "--d",
                "9",
                "--T",
                "10000",
                "--delta-g",
                "0.03",
                "--r-max",
                "1",
                "--alpha",
                "0.5",
                "--L",
                "2",
                "--json",
                str(path),
            ]
        )
        == 0
    )
    data = json.loads(path.read_text())
    assert (
        data
        == guardrail_regret_bound(
            d=9, T=10_000, delta_g=0.03, r_max=1.0, alpha=0.5, L=2.0
        ).to_dict()
    )
    assert set(data) >= {"linucb_term", "guardrail_term", "total", "per_round"}


def test_help_explains_each_option() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "service.cli", "bound", "guardrail", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    text = " ".join(run.stdout.split())
    for option_and_help in [
        "--d D context dimension d",
        "--T T number of rounds T",
        "--delta-g P delta_G, the probability that a guardrail blocks the optimal arm",
        "--r-max R R_max, the largest possible reward",
        "--alpha A alpha, the confidence width",
        "--L L L, the bound on the feature norm",
        "--json PATH also write the inputs and figures as a JSON object",
    ]:
        assert option_and_help in text
    assert "2*alpha*sqrt(2*T*d*log(1 + T*L^2/d))" in text and "delta_G*T*R_max" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--d", "0"], "argument --d: expected a positive integer, got '0'"),
        (["--T", "1.5"], "argument --T: expected a positive integer, got '1.5'"),
        (["--delta-g", "2"], "delta_g must be a finite number in [0, 1], but got 2.0"),
        (["--r-max", "-1"], "r_max must be a finite number > 0, but got -1.0"),
        (["--alpha", "nan"], "argument --alpha: expected a finite number, got 'nan'"),
        (["--L", "x"], "argument --L: expected a number, got 'x'"),
    ],
)
def test_invalid_options_exit_2_with_a_message(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = dict(zip(SEED_EXAMPLE[2::2], SEED_EXAMPLE[3::2]))
    base.update(dict(zip(args[::2], args[1::2])))
    with pytest.raises(SystemExit) as exc:
        main(SEED_EXAMPLE[:2] + [x for kv in base.items() for x in kv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_missing_required_option_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bound", "guardrail", "--d", "3", "--T", "10", "--delta-g", "0.1"])
    assert exc.value.code == 2
    assert "the following arguments are required: --r-max" in capsys.readouterr().err
