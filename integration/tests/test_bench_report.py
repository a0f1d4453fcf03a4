"""The committed benchmark results agree with themselves and with the docs (issue 14: "README's
table and the chart follow from that file"): the targets in integration/bench/results/latest.json are what
integration/bench/report.py computes from its rounds, and README.md's and docs/performance.md's tables are
the ones it renders. Nothing is measured here."""

from __future__ import annotations

import json
from pathlib import Path

from bench import report

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(report.__file__).resolve().parent / "results" / "latest.json"
IDS = ["P1", "P2", "P3", "P4", "P5", "P6", "P7.json", "P7.sse", "P8", "P8.load", "P8.memory", "P8.compile", "P9"]


def _results() -> dict:
    return json.loads(RESULTS.read_text())


def test_results_are_complete_and_name_every_target() -> None:
    res = _results()
    assert res.get("complete") is True, "latest.json is not from a complete run"
    ids = [t["id"] for t in res["targets"]]
    missing = [i for i in IDS if i not in ids]
    assert not missing, f"targets missing from latest.json: {missing}"
    for t in res["targets"]:
        assert {"id", "measured", "target", "met", "values", "spread"} <= t.keys(), t["id"]
        assert t["values"], f"{t['id']} has no values"
        if t["source"].startswith("wall clock") and t["met"]:
            assert len(t["values"]) >= 3, f"{t['id']} met on fewer than three rounds"


def test_targets_follow_from_the_rounds() -> None:
    res = _results()
    stored = {t["id"]: t for t in res["targets"]}
    for t in report.targets(res):
        s = stored.get(t["id"])
        assert s is not None, f"{t['id']} computed but not stored"
        assert s["met"] == t["met"], t["id"]
        assert abs(s["measured"] - t["measured"]) <= 1e-9 * max(1.0, abs(t["measured"])), t["id"]


def test_docs_tables_are_the_rendered_ones() -> None:
    res = _results()
    want = report.table_block(res)
    for doc in (ROOT / "README.md", ROOT / "docs" / "performance.md"):
        have = report.current_block(doc.read_text())
        assert have is not None, f"{doc.name} has no bench:targets block"
        assert have == want, f"{doc.name}'s table is not the one integration/bench/report.py renders from latest.json " \
                             "(run: python -m bench.report)"


def test_the_table_says_re_measured_only_when_a_pass_ran() -> None:
    res = _results()
    ran = any(r.get("remeasured") for v in res["variants"].values() for r in v.get("rounds", []))
    assert ("noisy ratios re-measured" in report.table_block(res)) == ran
    res["settings"]["remeasure_passes"] = 2
    for v in res["variants"].values():
        for r in v.get("rounds", []):
            r.pop("remeasured", None)
    assert "no time left to re-measure noisy ratios" in report.table_block(res)
    next(iter(res["variants"].values()))["rounds"][0]["remeasured"] = True
    assert "noisy ratios re-measured" in report.table_block(res)


def test_every_row_kind_sorts_and_scale_runs_need_their_full_size() -> None:
    res = _results()
    counts = {"g_ours": 700_000, "g_native": 650_000, "s2_allow_rl": 520_000}
    res.setdefault("envoy_instructions", {}).update(counts)
    res["scale_runs"] = {
        "cache": {"callers": 1_000_000, "rss_first_kib": 1000, "rss_max_kib": 1400, "file": "f", "date": "d"},
        "sse": {"minutes": 30.0, "slope_kib_per_hour_second_half": 0.0, "file": "g", "date": "d"},
    }
    rows = {t["id"]: t for t in report.targets(res)}
    ids = list(rows)
    assert ids.index("P9") < ids.index("G.instructions") < ids.index("G1") < ids.index("S.cache"), ids
    assert rows["S.cache"]["met"] and abs(rows["S.cache"]["measured"] - 400 / 1024) < 1e-3
    assert not rows["S.sse"]["met"], "a 30-minute stream is not the hour the goal asks for"
    res["scale_runs"]["cache"]["callers"] = 999_999
    assert not {t["id"]: t for t in report.targets(res)}["S.cache"]["met"]
