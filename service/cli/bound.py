"""``bandit bound``: regret-bound calculators.

``bandit bound guardrail --d 128 --T 1e6 --delta-g 0.01 --r-max 100`` prints Theorem 1's
bound for guardrailed LinUCB (:func:`bandit_core.bounds.guardrail_regret_bound`), its
LinUCB and guardrail terms and the per-round figure; ``--json PATH`` also writes them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from bandit_core.bounds import GuardrailBound, guardrail_regret_bound
from bandit_core.errors import BanditError
from service.cli.exit_codes import EXIT_OK


def _count(text: str) -> int:
    """A positive integer, also written as ``1e6``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if not math.isfinite(value) or value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(value)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``bound`` and its subcommands to ``subparsers``."""
    bound = subparsers.add_parser(
        "bound",
        help="regret-bound calculators",
        description="Regret-bound calculators for the project's algorithms.",
    )
    kinds = bound.add_subparsers(dest="bound_kind", required=True, metavar="KIND")
    g = kinds.add_parser(
        "guardrail",
        help="Theorem 1 bound of guardrailed LinUCB",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Theorem 1 (docs/algorithms.md section 3.2): expected regret over T rounds\n"
            "  R(T) <= 2*alpha*sqrt(2*T*d*log(1 + T*L^2/d))   (LinUCB term)\n"
            "        + delta_G*T*R_max                        (guardrail term)\n"
            "Prints both terms, the bound and the bound per round."
        ),
        epilog=(
            "example (the theorem's worked example, computed correctly):\n"
            "  bandit bound guardrail --d 128 --T 1e6 --delta-g 0.01 --r-max 100"
        ),
    )
    g.add_argument(
        "--d",
        type=_count,
        required=True,
        metavar="D",
        help="context dimension d (for disjoint per-arm LinUCB: arms x per-arm dimension)",
    )
    g.add_argument(
        "--T",
        type=_count,
        required=True,
        metavar="T",
        help="number of rounds T (an integer; 1e6 is accepted)",
    )
    g.add_argument(
        "--delta-g",
        type=_number,
        required=True,
        metavar="P",
        help="delta_G, the probability that a guardrail blocks the optimal arm, in [0, 1] "
        "(the policy's measured delta_g stat estimates it)",
    )
    g.add_argument(
        "--r-max",
        type=_number,
        required=True,
        metavar="R",
        help="R_max, the largest possible reward (rewards lie in [0, R_max]), > 0",
    )
    g.add_argument(
        "--alpha",
        type=_number,
        default=1.0,
        metavar="A",
        help="alpha, the confidence width of Lemma 3.1 (the policy's alpha), >= 0; default 1",
    )
    g.add_argument(
        "--L",
        type=_number,
        default=1.0,
        metavar="L",
        help="L, the bound on the feature norm ||x||, > 0; default 1",
    )
    g.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="also write the inputs and figures as a JSON object to PATH",
    )
    g.set_defaults(run=_run_guardrail, parser=g)


def format_bound(b: GuardrailBound) -> str:
    """Human-readable lines for one bound."""
    return "\n".join(
        [
            "Theorem 1 regret bound, guardrailed LinUCB",
            f"  inputs: d={b.d}  T={b.T}  delta_G={b.delta_g:g}  R_max={b.r_max:g}  alpha={b.alpha:g}  L={b.L:g}",
            f"  LinUCB term     2*alpha*sqrt(2*T*d*log(1 + T*L^2/d)) = {b.linucb_term:,.2f}",
            f"  guardrail term  delta_G*T*R_max                      = {b.guardrail_term:,.2f}",
            f"  bound R(T) <=                                          {b.total:,.2f}",
            f"  per round       bound / T                            = {b.per_round:.6g}",
        ]
    )


def _run_guardrail(args: argparse.Namespace) -> int:
    try:
        b = guardrail_regret_bound(
            d=args.d, T=args.T, delta_g=args.delta_g, r_max=args.r_max, alpha=args.alpha, L=args.L
        )
    except BanditError as exc:
        args.parser.error(str(exc))
    print(format_bound(b))
    if args.json is not None:
        args.json.write_text(json.dumps(b.to_dict(), indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return EXIT_OK
