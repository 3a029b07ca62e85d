"""``python -m tests.golden``: say which golden files are out of date, with their diffs;
``--update`` writes every one of them again from what the code renders now."""

from __future__ import annotations

import argparse
import sys

from tests.golden import CASES, REPO, check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.golden", description=__doc__)
    parser.add_argument(
        "--update", action="store_true", help="rewrite the golden files from what renders now"
    )
    args = parser.parse_args(argv)
    stale = 0
    for case in CASES:
        if args.update:
            produced = case.produce()
            before = case.golden.read_text() if case.golden.exists() else None
            case.golden.parent.mkdir(parents=True, exist_ok=True)
            case.golden.write_text(produced)
            state = "unchanged" if before == produced else "written"
            print(f"{state:>9}  {case.golden.relative_to(REPO)}  ({case.name})")
            continue
        problem = check(case)
        if problem is not None:
            stale += 1
            print(problem)
    if not args.update:
        print(f"{len(CASES) - stale} of {len(CASES)} golden files up to date")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
