"""`prefixbench report`: every number in report.md recomputed here from agg.parquet."""

from __future__ import annotations

import re
import shutil

import polars as pl
import pytest
from studyutil import make_tiny_study
from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.errors import ArtifactError
from prefixbench.io.artifacts import read_artifact, write_atomic
from prefixbench.study.recommend import recommend
from prefixbench.study.report import write_report

runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1"})
POLICIES = [
    "transfer_per_request",
    "recompute_on_decode",
    "replicate_hotset",
    "replicate_all_lru",
    "replicate_tiered",
]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return make_tiny_study(tmp_path_factory.mktemp("study"))


@pytest.fixture(scope="module")
def report(results):
    path = write_report(results)
    return path, path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def agg(results):
    return read_artifact(results / "agg.parquet", "agg")


def _row(text: str, first_cell: str, section: str) -> list[str]:
    """Cells of the table row starting with ``first_cell`` under heading ``section``."""
    body = text.split(section, 1)[1].split("\n### ", 1)[0]
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell} under {section}")


def test_written_next_to_results_by_default(report, results):
    assert report[0] == results / "report.md"


@pytest.mark.parametrize(
    ("section", "keep"),
    [
        ("### Relaxed regime", pl.col("budget_factor") >= 0.75),
        ("### Tight regime", pl.col("budget_factor") <= 0.5),
    ],
)
def test_regime_tables_match_agg(report, agg, section, keep):
    text = report[1]
    rows = agg.filter(keep)
    # each policy's means are over the scenarios where it is stable
    means = {
        p: rows.filter((pl.col("policy") == p) & pl.col("stable"))
        .select(pl.all().exclude(pl.Utf8).mean())
        .row(0, named=True)
        for p in POLICIES
    }
    for p in POLICIES:
        m = means[p]
        if m["ttft_mean_ms"] is None:  # unstable in every scenario: named, not tabled
            body = text.split(section, 1)[1].split("\n### ", 1)[0]
            assert "Unstable in every scenario of this regime" in body and f"`{p}`" in body
            continue
        cells = _row(text, f"`{p}`", section)
        assert cells[1] == f"{m['ttft_mean_ms']:.1f} ms"
        assert cells[2] == f"{m['throughput_rps']:.2f} req/s"
        assert cells[3] == f"{m['reject_rate']:.1%}"
        assert cells[4] == f"{m['shared_request_fraction']:.3f}"
        assert cells[5] == f"{m['replica_hit_rate']:.3f}"
        assert cells[6] == f"{m['mean_replica_kv_gb'] * 1000:.1f} MB"
        if p != "transfer_per_request":
            # paired: over the scenarios where both this policy and transfer are stable
            key = ["model", "workload", "budget_factor"]
            ok = rows.filter(pl.col("stable"))
            both = ok.filter(pl.col("policy") == p).join(
                ok.filter(pl.col("policy") == "transfer_per_request"), on=key, suffix="_b"
            )
            ratio = both["ttft_mean_ms"].mean() / both["ttft_mean_ms_b"].mean() - 1
            assert cells[8] == f"{ratio:+.1%} (N={both.height})"


def test_best_relaxed_case_is_the_largest_replica_gain(report, agg):
    relaxed = agg.filter(pl.col("budget_factor") >= 0.75)
    best = None
    for (_model, work, _b), grp in relaxed.group_by(["model", "workload", "budget_factor"]):
        by = {r["policy"]: r["ttft_mean_ms"] for r in grp.iter_rows(named=True)}
        # the replica policies: every replicate_* the study ran
        rep = min((p for p in by if p.startswith("replicate")), key=by.__getitem__)
        gain = 1 - by[rep] / by["transfer_per_request"]
        if best is None or gain > best[0]:
            best = (gain, work, rep, by[rep])
    section = report[1].split("### Best relaxed case", 1)[1].split("###", 1)[0]
    assert f"- Workload: `{best[1]}`" in section
    assert f"- `{best[2]}`: {best[3]:.1f} ms" in section
    assert f"- TTFT reduction: {best[0]:.1%}" in section


def test_cliff_case_lists_every_policy(report, agg):
    agg = agg.filter(pl.col("stable"))  # the report's results sections: stable rows
    worst = (
        agg.group_by(["model", "workload", "budget_factor"])
        .agg(pl.col("reject_rate").mean())
        # the highest mean reject rate; a tie goes to the first scenario by name, then budget
        .sort(
            ["reject_rate", "model", "workload", "budget_factor"],
            descending=[True, False, False, False],
        )
        .row(0, named=True)
    )
    section = report[1].split("### Worst case", 1)[1].split("\n### ", 1)[0]
    assert f"`{worst['workload']}` / budget factor {worst['budget_factor']:g}" in section
    rows = agg.filter(
        (pl.col("workload") == worst["workload"])
        & (pl.col("budget_factor") == worst["budget_factor"])
    )
    for r in rows.iter_rows(named=True):
        cells = _row(report[1], f"`{r['policy']}`", "### Worst case")
        assert cells[1:3] == [f"{r['ttft_mean_ms']:.1f} ms", f"{r['reject_rate']:.1%}"]


def test_transfer_vs_recompute_section(report, agg):
    section = report[1].split("## Transfer vs recompute", 1)[1].split("\n## ", 1)[0]
    assert "qwen2-0.5b on l4 over eth-25g" in section
    stable = agg.filter(pl.col("stable"))  # paired over scenarios where both are stable
    piv = stable.pivot(on="policy", index=["workload", "budget_factor"], values="ttft_mean_ms")
    d = piv["transfer_per_request"] - piv["recompute_on_decode"]
    assert f"ranges from {d.min():.1f} ms to {d.max():.1f} ms" in section


def test_recommendation_counts_and_file(report, results, agg):
    rec_file = read_artifact(results / "recommendations.parquet", "recommendations")
    rec = recommend(agg, read_artifact(results / "runs.parquet", "runs"), "balanced")
    assert rec_file.equals(rec)
    text = report[1]
    for p in POLICIES:
        assert f"- `{p}`: {(rec['recommended'] == p).sum()}\n" in text
    section = text.split("## Recommendations", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(
        r"^\| `qwen2-0.5b` \| `(\w+)` \| ([\d.]+) \| `(\w+)` \|", section, flags=re.M
    )
    expected = [
        (r["workload"], f"{r['budget_factor']:g}", r["recommended"])
        for r in rec.iter_rows(named=True)
    ]
    assert listed == expected


def test_scope_and_how_to_read(report, agg):
    text = report[1]
    assert "- Simulation runs: 56" in text  # 2 workloads x 2 budgets x 7 policies x 2 seeds
    assert f"(model × workload × budget × policy): {agg.height}" in text
    assert "- Seeds (2): 0, 1" in text
    assert "roofline" in text and "docs/model.md" in text and "simulated" in text


def test_other_objective_file_is_left_alone(results, tmp_path):
    folder = tmp_path / "r"
    shutil.copytree(results, folder, ignore=shutil.ignore_patterns("parts", "report.md"))
    agg = read_artifact(folder / "agg.parquet", "agg")
    latency = recommend(agg, read_artifact(folder / "runs.parquet", "runs"), "latency")
    write_atomic(latency, folder / "recommendations.parquet", "recommendations")
    text = write_report(folder, tmp_path / "out.md").read_text(encoding="utf-8")
    assert "Balanced objective" in text
    kept = read_artifact(folder / "recommendations.parquet", "recommendations")
    assert set(kept["objective"]) == {"latency"}


def test_plots_are_embedded_with_relative_links(results, tmp_path):
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "01_mean_ttft_by_policy.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    out = tmp_path / "doc" / "report.md"
    text = write_report(results, out, plots=plots).read_text(encoding="utf-8")
    assert "](../plots/01_mean_ttft_by_policy.png)" in text


def test_wrong_kind_parquet_names_the_file(results, tmp_path):
    for name in ("runs.parquet", "crossover.parquet"):
        shutil.copy(results / name, tmp_path / name)
    shutil.copy(results / "prefixes.parquet", tmp_path / "agg.parquet")
    with pytest.raises(ArtifactError) as e:
        write_report(tmp_path)
    assert str(tmp_path / "agg.parquet") in str(e.value)
    assert "expected a prefixbench 'agg' file" in str(e.value)


def test_cli_report(results, tmp_path):
    out = tmp_path / "r.md"
    r = runner.invoke(app, ["report", str(results), "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() == str(out)
    assert out.read_text(encoding="utf-8").startswith("# prefixbench study report")


def test_cli_report_missing_folder_is_one_line(tmp_path):
    r = runner.invoke(app, ["report", str(tmp_path / "nowhere")])
    assert r.exit_code == 2
    assert len(r.stderr.strip().splitlines()) == 1
    assert "nowhere" in r.stderr
    assert "Traceback" not in r.output + r.stderr


def test_cli_report_embeds_figures_and_writes_self_contained_html(results, tmp_path):
    import base64
    from html.parser import HTMLParser

    out = tmp_path / "r.md"
    r = runner.invoke(app, ["report", str(results), "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    md = out.read_text(encoding="utf-8")
    pngs = sorted((out.parent / "plots").glob("*.png"))  # beside the report, not in results/
    assert pngs and all(f"{p.name})" in md for p in pngs)  # embedded by default

    class Page(HTMLParser):
        def __init__(self):
            super().__init__()
            self.imgs, self.tables, self.links = [], 0, []

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "img":
                self.imgs.append(a["src"])
            elif tag == "table":
                self.tables += 1
            elif tag in ("link", "script") and (a.get("href") or a.get("src")):
                self.links.append(a.get("href") or a.get("src"))

    page = Page()
    page.feed(out.with_suffix(".html").read_text(encoding="utf-8"))
    # every figure inline (the PNG's own bytes), every Markdown table, nothing fetched
    assert len(page.imgs) == len(pngs)
    inline = {base64.b64decode(src.split(",", 1)[1]) for src in page.imgs}
    assert inline == {p.read_bytes() for p in pngs}
    md_tables = sum(
        1 for line in md.splitlines() if line.startswith("|---") or line.startswith("| ---")
    )
    assert page.tables == md_tables > 0
    assert page.links == []
    assert (out.with_suffix(".html").stat().st_mode & 0o777) == (
        (results / "agg.parquet").stat().st_mode & 0o777
    )


def _chromium() -> str | None:
    return next((c for c in ("chromium", "chromium-browser", "google-chrome") if shutil.which(c)), None)


@pytest.mark.skipif(_chromium() is None, reason="no headless Chromium (apt-get install chromium)")
def test_report_html_renders_every_figure_and_table_in_chromium(results, tmp_path):
    """Load report.html in headless Chromium: every figure decodes to a real image and every
    table is there, with no network. A probe script appended to a copy of the page (the page
    itself is left alone) counts them after load and writes the count into the title."""
    import subprocess

    out = tmp_path / "r.md"
    assert runner.invoke(app, ["report", str(results), "--out", str(out)]).exit_code == 0
    html = out.with_suffix(".html").read_text(encoding="utf-8")
    n_img, n_table = html.count("<img "), html.count("<table")
    assert n_img > 0 and n_table > 0
    probe = (
        "<script>window.addEventListener('load', function () {"
        "var ok = Array.from(document.images).filter(function (i) {"
        "return i.complete && i.naturalWidth > 100 && i.naturalHeight > 100; }).length;"
        "var heads = document.querySelectorAll('table th').length;"
        "document.title = 'probe ' + ok + ' ' + document.querySelectorAll('table').length"
        " + ' ' + heads; });</script>"
    )
    page = tmp_path / "probe.html"
    page.write_text(html.replace("</body>", probe + "</body>"), encoding="utf-8")
    r = subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    m = re.search(r"<title>probe (\d+) (\d+) (\d+)</title>", r.stdout)
    assert m, (r.stdout[-500:], r.stderr[-500:])
    images, tables, headers = map(int, m.groups())
    assert images == n_img  # every figure decoded, none broken
    assert tables == n_table and headers >= tables


def test_energy_section_is_the_seed_mean_of_each_run(report, results):
    """The energy table's figure for a scenario and policy is the mean over seeds of the
    runs' own energy per output token (runs.parquet), to the 4 decimals it prints."""
    _, text = report
    assert "### Energy per output token (J)" in text
    runs = read_artifact(results / "runs.parquet", "runs")
    r0 = runs.row(0, named=True)
    same = runs.filter(
        (pl.col("model") == r0["model"])
        & (pl.col("workload") == r0["workload"])
        & (pl.col("budget_factor") == r0["budget_factor"])
        & (pl.col("policy") == r0["policy"])
    )
    assert same.height >= 2 and same["energy_per_token_j"].min() > 0
    want = sum(same["energy_per_token_j"].to_list()) / same.height
    body = text.split("### Energy per output token (J)", 1)[1].split("\n#", 1)[0]
    header = next(line for line in body.splitlines() if line.startswith("| Model"))
    col = [c.strip() for c in header.strip().strip("|").split("|")].index(f"`{r0['policy']}`")
    cells = None
    for line in body.splitlines():
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if c[:3] == [f"`{r0['model']}`", f"`{r0['workload']}`", f"{r0['budget_factor']:g}"]:
            cells = c
    assert cells is not None
    assert float(cells[col]) == pytest.approx(want, abs=5e-5)


def test_vs_transfer_is_paired_over_scenarios_where_both_are_stable():
    """transfer is unstable on scenario B: the comparison is over A alone (N=1), not the
    mean over A and B against transfer's mean over A."""
    from prefixbench.study.report import paired_vs_baseline

    def row(w, policy, ttft):
        return {"model": "m", "workload": w, "budget_factor": 0.5, "policy": policy,
                "ttft_mean_ms": ttft}  # fmt: skip

    stable_rows = pl.DataFrame(
        [row("A", "transfer_per_request", 100.0), row("A", "replicate_hotset", 50.0),
         row("B", "replicate_hotset", 500.0)]
    )  # fmt: skip
    got = paired_vs_baseline(stable_rows).filter(pl.col("policy") == "replicate_hotset").row(
        0, named=True
    )
    assert got["paired"] == 1
    assert got["ttft_vs_transfer"] == pytest.approx(50.0 / 100.0 - 1)  # not 275/100 - 1
