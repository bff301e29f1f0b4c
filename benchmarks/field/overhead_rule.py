"""Lab tool: the budget rule on recorded passes, offline. For every pass in the raw streams of
``capture_sampled_raw.py`` (OUTDIR/raw.json.gz, or a field fixture with ``cells``), each sampled step against its
own clean reference: the pooled overhead, the slowest variant, the permutation test on ranks
(``standout.highest_group``) and the budget's decision, by the slowest variant alone (the rule before the test)
and as the pass now decides (``Overheads.within``). docs/performance.md has what it printed:

    python3 benchmarks/field/overhead_rule.py OUTDIR [OUTDIR ...]
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

from launchprobe.analysis import sampled


def passes(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path / "raw.json.gz" if path.is_dir() else path, "rt") as f:
        data = json.load(f)
    records = data["cells"] if isinstance(data, dict) else data
    return [r for r in records if "steps" in r]


def slowest_rule(o: sampled.Overheads, budget: float) -> bool | None:
    if o.pooled > budget or o.slowest - 2 * o.slowest_error > budget:
        return False
    return None if o.slowest_error > budget / 2 else True


def main() -> None:
    budget = sampled.OVERHEAD_BUDGET
    word = {True: "yes", False: "NO", None: "not decided"}
    print(
        "| source | shape | mode | b | variants | steps | pooled | slowest | standout p | shuffled p95 "
        "| slowest rule | as decided |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for arg in sys.argv[1:]:
        for r in passes(Path(arg)):
            steps = [sampled.SampledStep(v, length, {}, ref) for v, length, _, ref in r["steps"]]
            o = sampled.local_overheads(steps, 1.0)  # every recorded step carries its reference
            shape = "1B" if len(r["names"]) == 163 else "8B"
            print(
                f"| {Path(arg).name} | {shape} | {r['mode']} | {r['bucket']} | {len(o.per_variant)} | {len(steps)} | "
                f"{o.pooled:+.2%} +/- {o.pooled_error:.2%} | {o.slowest:+.1%} +/- {o.slowest_error:.1%} | "
                f"{o.standout_p:.3f} | {o.shuffled_slowest_q95:+.1%} | {word[slowest_rule(o, budget)]} | "
                f"{word[o.within(budget)]} ({'pooled' if o.none_stands_out else 'slowest'}) |"
            )


if __name__ == "__main__":
    main()
