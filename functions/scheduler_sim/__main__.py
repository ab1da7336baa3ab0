"""`python -m scheduler_sim`: run seeds of the simulation, or replay one.

python -m scheduler_sim --seeds 2000                 # seeds 0..1999; summary; exit 1 on any failure
python -m scheduler_sim --seeds 500 --start 10000    # seeds 10000..10499
python -m scheduler_sim --seed 1234 --trace          # replay one seed, every event and port call
python -m scheduler_sim --seeds 200 --variant unfenced-finish   # a deliberately broken protocol
python -m scheduler_sim --seeds 2000 --avoid-known-bugs           # stay out of the open bugs' windows
python -m scheduler_sim --seeds 2000 --sweepers 3    # three concurrent sweepers in every seed (default: 1-3 drawn)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from scheduler_sim.faults import KNOWN_BUGS_AVOIDED, Exposure
from scheduler_sim.report import format_event, format_failure, run_seed, run_seeds
from scheduler_sim.variants import VARIANTS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scheduler_sim", description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--seeds", type=int, default=None, help="how many seeds to run (default 100)")
    which.add_argument("--seed", type=int, default=None, help="run (replay) this one seed")
    parser.add_argument("--start", type=int, default=0, help="first seed of --seeds (default 0)")
    parser.add_argument("--trace", action="store_true", help="print the whole event trace, port calls included")
    parser.add_argument("--variant", choices=sorted(VARIANTS), help="run a deliberately broken protocol")
    parser.add_argument(
        "--avoid-known-bugs",
        action="store_true",
        help="keep out of the fault windows and edits where the known core bugs strike (see the README)",
    )
    parser.add_argument(
        "--sweepers",
        type=int,
        default=None,
        help="concurrent sweepers in every seed (default: each seed draws 1-3; a seed's other draws are unchanged)",
    )
    parser.add_argument("--processes", type=int, default=1, help="worker processes for --seeds (default 1)")
    parser.add_argument("--show", type=int, default=3, help="failure reports printed in full (default 3)")
    parser.add_argument("--events", type=int, default=60, help="events per failure report (0: all)")
    return parser


def _one(
    seed: int, variant: str | None, exposure: Exposure | None, trace: bool, events: int, sweepers: int | None
) -> int:
    result = run_seed(seed, variant=variant, exposure=exposure, trace_calls=trace, sweepers=sweepers)
    if trace:
        for event in result.events:
            print(format_event(event))
    if result.ok:
        print(f"seed {seed} passed ({result.stats})")
        return 0
    print(format_failure(result, variant=variant, exposure=exposure, events=0 if trace else events, sweepers=sweepers))
    return 1


def _many(
    seeds: list[int],
    variant: str | None,
    exposure: Exposure | None,
    processes: int,
    show: int,
    events: int,
    sweepers: int | None,
) -> int:
    summary = run_seeds(seeds, variant=variant, exposure=exposure, processes=processes, sweepers=sweepers)
    for result in summary.failed[:show]:
        print(format_failure(result, variant=variant, exposure=exposure, events=events, sweepers=sweepers))
        print()
    if len(summary.failed) > show:
        more = ", ".join(str(r.seed) for r in summary.failed[show : show + 50])
        print(f"more failing seeds: {more}{' ...' if len(summary.failed) > show + 50 else ''}")
    print(summary.line())
    return 1 if summary.failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.sweepers is not None and args.sweepers < 1:
        parser.error(f"--sweepers must be at least 1, not {args.sweepers}")
    exposure = KNOWN_BUGS_AVOIDED if args.avoid_known_bugs else None
    if args.seed is not None:
        return _one(args.seed, args.variant, exposure, args.trace, args.events, args.sweepers)
    count = 100 if args.seeds is None else args.seeds
    seeds = list(range(args.start, args.start + count))
    return _many(seeds, args.variant, exposure, args.processes, args.show, args.events, args.sweepers)


if __name__ == "__main__":
    sys.exit(main())
