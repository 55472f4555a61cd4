"""`ptxbench report` and `ptxbench compare` on synthetic runs with known GPU numbers (written through the
plugin's own writers): exact shares, intervals, pass@k, fast_p, budgets, failure mix, tokens and cost; the
HTML page rendered in headless Chromium; runs of different task sets refused."""

from __future__ import annotations

import base64
import html.parser
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_ptxbench.report.cli import load_runs, main
from pytest_ptxbench.report.compare import compare
from pytest_ptxbench.report.runs import RunError, load_run
from pytest_ptxbench.report.scores import Score, score_runs
from pytest_ptxbench.report.stats import bootstrap_geomean, fast_p, pass_at_k, wilson
from pytest_ptxbench.report.tables import Table
from pytest_ptxbench.report.tables import tables as build_tables
from pytest_ptxbench.task.catalogue import Family

from .synthetic_runs import Turn, write_run

MODEL = "openai:fake-a"
# Four trajectories of four turns at most (budgets 1 and 4):
#   t1: build fails, then a verified kernel at 1.2x;  t2: verified at 0.6x, then check fails;
#   t3: inspect fails, then correct but profile fails, timed at 2.0x;  t4: no kernel twice.
SCRIPTS = [
    [Turn(1, failing="build"), Turn(2, 1.2)],
    [Turn(3, 0.6), Turn(4, failing="check")],
    [Turn(5, failing="inspect"), Turn(6, 2.0, failing="profile")],
    [Turn(None), Turn(None)],
]


@pytest.fixture
def run(tmp_path: Path, gemm: Family) -> Path:
    return write_run(tmp_path / "run", gemm, MODEL, SCRIPTS)


def rows(table: Table) -> list[list[str]]:
    return table.rows


def test_estimators_match_known_values() -> None:
    assert wilson(3, 4) == pytest.approx((0.30064, 0.95441), abs=1e-5)  # as statsmodels' proportion_confint
    assert wilson(0, 1) == pytest.approx((0.0, 0.79346), abs=1e-5)
    assert pass_at_k(4, 2, 1) == 0.5
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)
    assert pass_at_k(3, 2, 2) == 1.0
    with pytest.raises(ValueError, match="needs 1 <= k <= n"):
        pass_at_k(2, 1, 5)
    assert [fast_p([1.2, 0.6, 2.0, None], p) for p in (0, 0.5, 0.8, 1.0, 1.5)] == [0.75, 0.75, 0.5, 0.5, 0.25]
    lo, hi = bootstrap_geomean([0.5, 1.0, 2.0, 4.0])
    assert lo < 1.4142 < hi and bootstrap_geomean([0.5, 1.0, 2.0, 4.0]) == (lo, hi)  # seeded
    assert bootstrap_geomean([1.5, 1.5]) == pytest.approx((1.5, 1.5))


def test_scores_of_each_trajectory(run: Path) -> None:
    scores = score_runs([load_run(run)])
    assert [s.final for s in scores] == [
        Score(True, True, pytest.approx(1.2)),
        Score(True, True, pytest.approx(0.6)),
        Score(True, False, pytest.approx(2.0)),
        Score(False, False, None),
    ]
    assert [s.turns for s in scores] == [
        ("build", "passed"),
        ("passed", "check"),
        ("inspect", "profile"),
        ("no kernel", "no kernel"),
    ]
    assert [{k: b.turn for k, b in s.budgets.items()} for s in scores] == [
        {1: 1, 4: 2},
        {1: 1, 4: 1},
        {1: 1, 4: 2},
        {1: None, 4: None},
    ]
    assert scores[0].budgets[1].hidden is None  # turn 1 is not the kernel the run scored on hidden shapes
    assert scores[1].budgets[1].hidden == Score(True, True, pytest.approx(0.6))
    assert len(scores[0].shapes) == 12 and scores[0].shapes["m70"] == (True, Score(True, True, pytest.approx(1.2)))
    assert (scores[0].calls, scores[0].input_tokens, scores[0].output_tokens) == (2, 200, 100)
    assert scores[0].cost == pytest.approx(0.02)


def test_report_tables_hold_the_known_numbers(run: Path) -> None:
    tables = {t.title: t for t in build_tables(score_runs([load_run(run)]))}
    assert rows(tables["Results"]) == [
        [
            MODEL, "h100", "gemm-n128-k2048", "4",
            "3/4 = 75% [30%, 95%]", "2/4 = 50% [15%, 85%]", "2.00x",
            "1.13x [0.60, 2.00]",
        ]
    ]  # fmt: skip
    assert rows(tables["By turn budget"]) == [
        [MODEL, "h100", "gemm-n128-k2048", "1", "1/4 = 25% [5%, 70%]", "1/4 = 25% [5%, 70%]", "0.60x",
         "1/1 = 100% [21%, 100%]", "1/1 = 100% [21%, 100%]", "0.60x"],
        [MODEL, "h100", "gemm-n128-k2048", "4", "3/4 = 75% [30%, 95%]", "2/4 = 50% [15%, 85%]", "2.00x",
         "3/3 = 100% [44%, 100%]", "2/3 = 67% [21%, 94%]", "2.00x"],
    ]  # fmt: skip
    pass_row = rows(tables["pass@k and fast_p"])[0]
    assert pass_row[3:] == ["4", "2", "0.500", "–", "–", "0.750", "0.750", "0.500", "0.500", "0.250"]
    shapes = rows(tables["Per shape"])
    assert len(shapes) == 12
    assert shapes[shapes.index(next(r for r in shapes if r[3] == "m8192"))][4:7] == [
        "no",
        "3/4 = 75% [30%, 95%]",
        "2.00x",
    ]
    assert rows(tables["Failure stage per turn"]) == [
        [MODEL, "1", "4", "1", "1", "1", "0", "0", "0", "0", "0", "1"],
        [MODEL, "2", "4", "1", "0", "0", "1", "1", "0", "0", "0", "1"],
    ]
    assert tables["Failure stage per turn"].header[3:] == [
        "no kernel", "build", "inspect", "check", "profile", "sanitize", "time", "none failed", "passed",
    ]  # fmt: skip
    assert rows(tables["Tokens and cost"]) == [[MODEL, "4", "8", "800", "400", "0.0800", "0.0200"]]


def test_runs_are_merged_and_a_reference_run_has_no_turns(run: Path, tmp_path: Path, gemm: Family) -> None:
    other = write_run(tmp_path / "other", gemm, MODEL, [[Turn(7, 1.5)]])
    reference = write_run(tmp_path / "reference", gemm, "reference", [[Turn(8, 0.9)]], turns=0)
    tables = {t.title: t for t in build_tables(score_runs(load_runs([run, other, reference], False)))}
    assert [r[:5] for r in rows(tables["Results"])] == [
        [MODEL, "h100", "gemm-n128-k2048", "5", "4/5 = 80% [38%, 96%]"],
        ["reference", "h100", "gemm-n128-k2048", "1", "1/1 = 100% [21%, 100%]"],
    ]
    assert [r[0] for r in rows(tables["Tokens and cost"])] == [MODEL]  # the reference agent made no call


def test_different_task_sets_are_refused_unless_allowed(run: Path, tmp_path: Path, gemm: Family) -> None:
    other = write_run(tmp_path / "other", gemm, MODEL, [[Turn(7, 1.5)]], task_set="fedcba9876543210")
    with pytest.raises(RunError, match=r"different task sets: 0123456789abcdef .*, fedcba9876543210 .*--allow-mixed"):
        load_runs([run, other], allow_mixed=False)
    assert len(load_runs([run, other], allow_mixed=True)) == 2


def test_report_command_writes_markdown_and_self_contained_html(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib", reason="the plots need matplotlib (pip install 'pytest-ptxbench[report]')")
    out = tmp_path / "report"
    assert main(["report", str(run), "--out", str(out)]) == 0
    assert capsys.readouterr().out.split() == [str(out / "report.md"), str(out / "report.html")]
    markdown = (out / "report.md").read_text()
    assert "| openai:fake-a | h100 | gemm-n128-k2048 | 4 | 3/4 = 75% [30%, 95%] |" in markdown
    page = (out / "report.html").read_text()
    images = Images()
    images.feed(page)
    assert len(images.sources) == 3  # shares, per-shape speedups, failure mix
    for source in images.sources:
        assert source.startswith("data:image/png;base64,")
        assert base64.b64decode(source.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    assert "http" not in page  # nothing fetched from elsewhere
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.md"]  # no temporary left


def test_the_html_renders_in_headless_chromium(run: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plots need matplotlib (pip install 'pytest-ptxbench[report]')")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium to render the page (apt-get install chromium)")
    out = tmp_path / "report"
    assert main(["report", str(run), "--out", str(out)]) == 0
    shot = tmp_path / "report.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
    subprocess.run(
        [chromium, *flags, f"--screenshot={shot}", "--window-size=1280,2400", (out / "report.html").as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 50_000  # a page with plots, not a blank one


def test_compare_shows_what_changed(
    run: Path, tmp_path: Path, gemm: Family, capsys: pytest.CaptureFixture[str]
) -> None:
    # B: t1 now 1.5x (faster), t2 unchanged, t3 passes profile (failed → passed), t4 still no kernel
    changed = [[*SCRIPTS[0][:1], Turn(2, 1.5)], SCRIPTS[1], [*SCRIPTS[2][:1], Turn(6, 2.0)], SCRIPTS[3]]
    b = write_run(tmp_path / "b", gemm, MODEL, changed)
    table = compare(load_run(run), load_run(b))
    assert {r[0].rsplit("-", 1)[1] for r in table.rows} == {"t1", "t3"}
    first = next(r for r in table.rows if r[0] == "gemm-n128-k2048-h100-m8192-t1")
    assert first == ["gemm-n128-k2048-h100-m8192-t1", "passed", "passed", "1.20x", "1.50x", "faster"]
    third = next(r for r in table.rows if r[0] == "gemm-n128-k2048-h100-m8192-t3")
    assert third[1:3] == ["failed", "passed"] and third[-1] == "failed → passed"
    assert "failed → passed: 12, faster: 12, unchanged: 24" in table.note
    assert main(["compare", str(run), str(b)]) == 0
    assert "| gemm-n128-k2048-h100-m70-t1 | passed | passed | 1.20x | 1.50x | faster |" in capsys.readouterr().out


class Images(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.sources.append(dict(attrs)["src"] or "")
