#!/usr/bin/env python3
"""Per run: the retests' pass-to-pass differences (log units, each direction's passes in order),
how many are steps (over 3%), the largest, and the retests' seconds, from the JSON report that
`pairwise --json -` prints after the text report."""
import json, math, re, sys

for f in sys.argv[1:]:
    text = open(f).read()
    for block in re.findall(r"# ---- meshrun JSON report.*?\n(.*?)\n# ---- END meshrun JSON report ----", text, re.S):
        run = json.loads(block)
        by_dir = {}
        for m in run["retests"]:
            s = (m.get("bw") or {}).get("avg_gbps", 0)
            if s > 0:
                by_dir.setdefault((m["src"], m["dst"]), []).append(math.log(s))
        d = [abs(v[i + 1] - v[i]) for v in by_dir.values() for i in range(len(v) - 1)]
        print(f"{f}: {len(d)} differences, {sum(x > 0.03 for x in d)} steps over 3%, "
              f"largest {max(d):.4f}, retests {run['timings']['retest_s']:.1f} s")
