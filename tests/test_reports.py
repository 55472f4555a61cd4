"""`ptxbench report` and `ptxbench compare` on synthetic runs with known GPU numbers (written through the
plugin's own writers): exact shares, intervals, pass@k, fast_p, budgets, failure mix, tokens and cost; CUDA
and Triton side by side, and runs written before the languages read as CUDA; the HTML page rendered in
headless Chromium; runs of different task sets refused."""

from __future__ import annotations

import base64
import html.parser
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_ptxbench.agent.trajectory import standing
from pytest_ptxbench.report.cli import load_runs, main
from pytest_ptxbench.report.compare import compare
from pytest_ptxbench.report.html import share_bars
from pytest_ptxbench.report.runs import RunError, load_run
from pytest_ptxbench.report.scores import Score, score_runs
from pytest_ptxbench.report.stats import bootstrap_geomean, fast_p, pass_at_k, wilson
from pytest_ptxbench.report.tables import Table
from pytest_ptxbench.report.tables import tables as build_tables
from pytest_ptxbench.task.catalogue import Family
from pytest_ptxbench.verdict import Outcome, Verdict, decide

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


# The synthetic speed of light is the speedup / 2 on m8192 and / 8 on the other shapes; over a kernel's shapes:
LIGHT = (1 / 2 * (1 / 8) ** 11) ** (1 / 12)  # all 12
LIGHT_VISIBLE = (1 / 2 * 1 / 8) ** (1 / 2)  # m8192 and m972
LIGHT_HIDDEN = 1 / 8  # the other 10


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
    with pytest.raises(ValueError, match="at least one judged trajectory"):
        fast_p([], 1.0)  # no trajectory judged is no share of 0
    lo, hi = bootstrap_geomean([0.5, 1.0, 2.0, 4.0])
    assert lo < 1.4142 < hi and bootstrap_geomean([0.5, 1.0, 2.0, 4.0]) == (lo, hi)  # seeded
    assert bootstrap_geomean([1.5, 1.5]) == pytest.approx((1.5, 1.5))


def timed(speedup: float, verified: bool = True, light: float = LIGHT) -> Score:
    """A correct kernel timed on every shape: its speedup and its speed of light (geometric means)."""
    return Score(True, verified, pytest.approx(speedup), pytest.approx(speedup * light), True)


def test_wilson_bounds_hold_for_every_share_up_to_50() -> None:
    """0 <= lower <= k/n <= upper <= 1 exactly, rounding included (25 pairs were off by 5.55e-17)."""
    for n in range(51):
        for k in range(n + 1):
            lo, hi = wilson(k, n)
            share = k / n if n else lo
            assert 0.0 <= lo <= share <= hi <= 1.0, (k, n, lo, hi)
            assert (k > 0 or lo == 0.0) and (k < n or hi == 1.0), (k, n, lo, hi)


def test_scores_of_each_trajectory(run: Path) -> None:
    scores = score_runs([load_run(run)])
    assert [s.final for s in scores] == [timed(1.2), timed(0.6), timed(2.0, verified=False), Score()]
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
    assert scores[1].budgets[1].visible == timed(0.6, light=LIGHT_VISIBLE)
    assert scores[1].budgets[1].hidden == timed(0.6, light=LIGHT_HIDDEN)
    assert len(scores[0].shapes) == 12 and scores[0].shapes["m70"] == (True, timed(1.2, light=1 / 8))
    assert scores[0].shapes["m8192"] == (False, timed(1.2, light=1 / 2))
    assert (scores[0].calls, scores[0].input_tokens, scores[0].output_tokens) == (2, 200, 100)
    assert scores[0].cost == pytest.approx(0.02)


def test_report_tables_hold_the_known_numbers(run: Path) -> None:
    tables = {t.title: t for t in build_tables(score_runs([load_run(run)]))}
    # a CUDA-only report names no language: no lang column, no side-by-side table
    assert list(tables) == ["Results", "By turn budget", "Per shape", "pass@k and fast_p", *TAIL]
    assert not any("lang" in t.header for t in tables.values())
    # speed of light (LIGHT = 0.1403): the best 2.0 x LIGHT; the geometric mean (1.2 x 0.6 x 2.0)^(1/3) x LIGHT
    assert rows(tables["Results"]) == [
        [
            MODEL, "h100", "gemm-n128-k2048", "4",
            "3/4 = 75% [30%, 95%]", "2/4 = 50% [15%, 85%]", "2.00x", "28.1%",
            "1.13x [0.60, 2.00]", "15.8% [8.4%, 28.1%]",
        ]
    ]  # fmt: skip
    assert rows(tables["By turn budget"]) == [
        [MODEL, "h100", "gemm-n128-k2048", "1", "1/4 = 25% [5%, 70%]", "1/4 = 25% [5%, 70%]", "0.60x", "15.0%",
         "1/1 = 100% [21%, 100%]", "1/1 = 100% [21%, 100%]", "0.60x", "7.5%"],
        [MODEL, "h100", "gemm-n128-k2048", "4", "3/4 = 75% [30%, 95%]", "2/4 = 50% [15%, 85%]", "2.00x", "50.0%",
         "3/3 = 100% [44%, 100%]", "2/3 = 67% [21%, 94%]", "2.00x", "25.0%"],
    ]  # fmt: skip
    pass_row = rows(tables["pass@k and fast_p"])[0]
    assert pass_row[3:] == ["4", "2", "0", "0.500", "–", "–", "0.750", "0.750", "0.500", "0.500", "0.250"]
    shapes = {r[3]: r[4:] for r in rows(tables["Per shape"])}
    assert len(shapes) == 12
    ms = [int(shape.removeprefix("m")) for shape in shapes]
    assert ms == sorted(ms) and ms[0] == 70, ms  # by value, as in the console: m70 < m93 < ... < m8828
    assert shapes["m8192"] == [
        "no",
        "3/4 = 75% [30%, 95%]",
        "2.00x",
        "100.0%",
        "1.13x [0.60, 2.00]",
        "56.5% [30.0%, 100.0%]",
    ]
    assert shapes["m70"] == [
        "yes",
        "3/4 = 75% [30%, 95%]",
        "2.00x",
        "25.0%",
        "1.13x [0.60, 2.00]",
        "14.1% [7.5%, 25.0%]",
    ]
    assert rows(tables["Failure stage per turn"]) == [
        [MODEL, "1", "4", "1", "1", "1", "0", "0", "0", "0", "0", "1"],
        [MODEL, "2", "4", "1", "0", "0", "1", "1", "0", "0", "0", "1"],
    ]
    assert tables["Failure stage per turn"].header[3:] == [
        "no kernel", "build", "inspect", "check", "profile", "sanitize", "time", "none failed", "passed",
    ]  # fmt: skip
    assert rows(tables["Tokens and cost"]) == [[MODEL, "4", "8", "800", "400", "0.0800", "0.0200"]]


TAIL = ["Failure stage per turn", "Tokens and cost"]


# Triton kernels of the same model, trajectories numbered as the CUDA ones: verified at 0.5x and 0.4x, and
# one whose check failed on every shape.
TRITON = [[Turn(11, 0.5)], [Turn(12, 0.4)], [Turn(13, failing="check")]]


def test_cuda_and_triton_side_by_side(run: Path, tmp_path: Path, gemm: Family) -> None:
    """One run directory of both languages (as --ptx-lang=all writes it), beside a CUDA-only reference run:
    every table groups by language too, and the side-by-side table holds each language's figures."""
    write_run(run, gemm, MODEL, TRITON, lang="triton")
    assert sorted(p.name for p in (run / "trajectories").iterdir()) == [
        *(f"gemm-n128-k2048-h100-t{n}.json" for n in (1, 2, 3, 4)),
        *(f"gemm-n128-k2048-h100-triton-t{n}.json" for n in (1, 2, 3)),
    ]
    reference = write_run(tmp_path / "reference", gemm, "reference", [[Turn(8, 0.9)]], turns=0)
    scores = score_runs(load_runs([run, reference], False))
    triton = [s for s in scores if s.lang == "triton"]
    assert [(s.trajectory, s.turns) for s in triton] == [(1, ("passed",)), (2, ("passed",)), (3, ("check",))]
    assert [s.final for s in triton] == [timed(0.5), timed(0.4), Score(False, False)]
    assert next(s.final for s in scores if s.lang == "cuda" and s.model == MODEL) == timed(1.2)  # not merged
    tables = {t.title: t for t in build_tables(scores)}
    assert list(tables) == [
        "Results",
        "Languages side by side",
        "By turn budget",
        "Per shape",
        "pass@k and fast_p",
        *TAIL,
    ]
    task = ["h100", "gemm-n128-k2048"]
    side = tables["Languages side by side"]
    assert side.header == [
        "model", "target", "task",
        "cuda: trajectories", "cuda: correct and verified", "cuda: speedup (geomean [95% CI])",
        "triton: trajectories", "triton: correct and verified", "triton: speedup (geomean [95% CI])",
    ]  # fmt: skip
    assert rows(side) == [
        [MODEL, *task, "4", "2/4 = 50% [15%, 85%]", "1.13x [0.60, 2.00]", "3", "2/3 = 67% [21%, 94%]", "0.45x [0.40, 0.50]"],
        ["reference", *task, "1", "1/1 = 100% [21%, 100%]", "0.90x [0.90, 0.90]", "0", "–", "–"],
    ]  # fmt: skip
    assert [t.header[:4] for t in tables.values() if t is not side] == [["model", "target", "task", "lang"]] * 4 + [
        ["model", "lang", "turn", "kernels asked"],
        ["model", "lang", "trajectories", "model calls"],
    ]
    assert [r[:5] for r in rows(tables["Results"])] == [
        [MODEL, *task, "cuda", "4"],
        [MODEL, *task, "triton", "3"],
        ["reference", *task, "cuda", "1"],
    ]
    assert rows(tables["Results"])[1][5:7] == ["2/3 = 67% [21%, 94%]", "2/3 = 67% [21%, 94%]"]
    assert {tuple(r[:4]) for r in rows(tables["Per shape"])} == {
        (MODEL, *task, "cuda"),
        (MODEL, *task, "triton"),
        ("reference", *task, "cuda"),
    }
    assert rows(tables["pass@k and fast_p"])[1][:7] == [MODEL, *task, "triton", "3", "2", "0"]
    assert rows(tables["Failure stage per turn"]) == [
        [MODEL, "cuda", "1", "4", "1", "1", "1", "0", "0", "0", "0", "0", "1"],
        [MODEL, "cuda", "2", "4", "1", "0", "0", "1", "1", "0", "0", "0", "1"],
        [MODEL, "triton", "1", "3", "0", "0", "0", "1", "0", "0", "0", "0", "2"],
    ]
    assert rows(tables["Tokens and cost"]) == [
        [MODEL, "cuda", "4", "8", "800", "400", "0.0800", "0.0200"],
        [MODEL, "triton", "3", "3", "300", "150", "0.0300", "0.0100"],
    ]


def test_a_triton_only_report_names_its_language(tmp_path: Path, gemm: Family) -> None:
    only = write_run(tmp_path / "triton", gemm, MODEL, TRITON, lang="triton")
    tables = {t.title: t for t in build_tables(score_runs([load_run(only)]))}
    assert "Languages side by side" not in tables
    assert rows(tables["Results"])[0][:5] == [MODEL, "h100", "gemm-n128-k2048", "triton", "3"]


def test_the_report_command_puts_the_languages_side_by_side(run: Path, tmp_path: Path, gemm: Family) -> None:
    pytest.importorskip("matplotlib", reason="the plots need matplotlib (pip install 'pytest-ptxbench[report]')")
    write_run(run, gemm, MODEL, TRITON, lang="triton")
    out = tmp_path / "report"
    assert main(["report", str(run), "--out", str(out)]) == 0
    markdown = (out / "report.md").read_text()
    assert "## Languages side by side" in markdown
    assert (
        "| 4 | 2/4 = 50% [15%, 85%] | 1.13x [0.60, 2.00] | 3 | 2/3 = 67% [21%, 94%] | 0.45x [0.40, 0.50] |" in markdown
    )
    page = (out / "report.html").read_text()
    assert "<th>triton: speedup (geomean [95% CI])</th>" in page
    images = Images()
    images.feed(page)
    assert len(images.sources) == 4


def test_a_run_written_before_the_languages_reads_as_cuda(run: Path) -> None:
    """Rows without `lang` and trajectories without `info.ptxbench.lang`: the report is the same as of the
    run that names CUDA everywhere; a language the reader does not know is an error naming the line."""
    before = build_tables(score_runs([load_run(run)]))
    results = run / "results.jsonl"
    written = [json.loads(line) for line in results.read_text().splitlines()]
    assert {row["lang"] for row in written} == {"cuda"}
    results.write_text("".join(json.dumps({k: v for k, v in row.items() if k != "lang"}) + "\n" for row in written))
    for file in (run / "trajectories").iterdir():
        raw = json.loads(file.read_text())
        del raw["info"]["ptxbench"]["lang"]
        file.write_text(json.dumps(raw))
    old = load_run(run)
    assert {row["lang"] for row in old.results} == {"cuda"} and {t.lang for t in old.trajectories} == {"cuda"}
    assert build_tables(score_runs([old])) == before
    results.write_text(json.dumps({**written[0], "lang": "fortran"}) + "\n")
    with pytest.raises(RunError, match=r"results.jsonl:1: field 'lang' is \"fortran\"; expected one of cuda, triton"):
        load_run(run)


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
    assert len(images.sources) == 4  # shares, per-shape speedups and speed of light, failure mix
    assert "Share of the roofline reached per shape" in page and "<th>speed of light (geomean [95% CI])</th>" in page
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


def test_one_rule_decides_the_test_the_agents_ranking_and_the_report(tmp_path: Path, gemm: Family) -> None:
    """Turn 1's kernel could not be checked on m8192 (no reference) and passed every stage on m972 at 3x:
    its test outcome is skipped, the agent ranks it below turn 2's kernel that passed everywhere at 1x and
    hands that one over, and the report counts it as not judged: each through `verdict.stage_statuses`."""
    run = write_run(tmp_path / "run", gemm, MODEL, [[Turn(1, 3.0, no_reference="m8192"), Turn(2, 1.0)]])
    loaded = load_run(run)
    [record] = loaded.trajectories
    first = record.turns[0]
    assert decide([Verdict.from_json(v) for v in first["verdicts"]]).outcome is Outcome.SKIPPED
    assert standing(first) == (2, 0.0)
    assert record.best() is record.turns[1]
    [scored] = score_runs([loaded])
    assert scored.budgets[1].visible == Score(None, None, timed=None)
    assert scored.turns == ("none failed", "passed")
    assert scored.final == Score(True, True, pytest.approx(1.0), pytest.approx(LIGHT), True)


def test_what_was_not_judged_reads_not_judged_everywhere(tmp_path: Path, gemm: Family) -> None:
    """A run where no GPU of the target was: no share, pass@k, fast_p, speedup or speed of light is made up
    (not 0/3, not 0.000, no bar with an error bar up to 0.79). Beside it, a run of another model where one
    kernel failed inspect, which judges that one only: its shares count it, pass@k and fast_p need them all."""
    cpu = write_run(tmp_path / "cpu", gemm, MODEL, [[Turn(n, gpu=False)] for n in (1, 2, 3)])
    other = "openai:fake-b"
    partly = write_run(tmp_path / "partly", gemm, other, [[Turn(4, failing="inspect")], [Turn(5, gpu=False)]])
    scores = score_runs(load_runs([cpu, partly], False))
    assert [s.final for s in scores if s.model == MODEL] == [Score(None, None, timed=None)] * 3
    tables = {t.title: t for t in build_tables(scores)}
    task = ["h100", "gemm-n128-k2048"]
    partial = "0/1 = 0% [0%, 79%]; 1 not judged"
    assert rows(tables["Results"]) == [
        [MODEL, *task, "3", *["not judged"] * 6],
        [other, *task, "2", partial, partial, *["not judged"] * 4],
    ]
    assert rows(tables["By turn budget"])[0] == [MODEL, *task, "1", *["not judged"] * 8]
    assert {tuple(r[5:]) for r in rows(tables["Per shape"]) if r[0] == MODEL} == {("not judged",) * 5}
    assert rows(tables["pass@k and fast_p"]) == [
        [MODEL, *task, "3", "0", "3", *["not judged"] * 8],
        [other, *task, "2", "0", "1", *["not judged"] * 8],
    ]
    assert rows(tables["Failure stage per turn"])[0][-2:] == ["3", "0"]  # none failed, none passed
    correct, verified = share_bars(scores)
    assert (correct.rows, correct.not_judged, verified.rows, verified.not_judged) == ([1], [0], [1], [0])
    assert correct.shares == [0.0] and correct.errors == ([0.0], [pytest.approx(0.79346, abs=1e-5)])
    pytest.importorskip("matplotlib", reason="the plots need matplotlib (pip install 'pytest-ptxbench[report]')")
    out = tmp_path / "report"
    assert main(["report", str(cpu), "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "0.000" not in page and "0/3" not in page and "<td>not judged</td>" in page
    images = Images()
    images.feed(page)
    assert len(images.sources) == 2  # the shares (written not judged) and the failure mix; nothing timed


def test_plots_draw_shares_of_none_and_of_all(tmp_path: Path, gemm: Family) -> None:
    """0 of 3 and 10 of 10 correct: rounding put the Wilson bounds 5.55e-17 inside the share, and matplotlib
    refused the negative error bars ('xerr' must not contain negative values)."""
    none = write_run(tmp_path / "none", gemm, "openai:fake-none", [[Turn(1, failing="check")]] * 3)
    every = write_run(tmp_path / "every", gemm, "openai:fake-every", [[Turn(n, 1.1)] for n in range(10)])
    scores = score_runs(load_runs([none, every], False))
    for bars in share_bars(scores):
        assert bars.shares == [1.0, 0.0]  # every, then none
        assert all(error >= 0 for side in bars.errors for error in side)
        assert bars.errors[1][0] == 0.0 and bars.errors[0][1] == 0.0
    pytest.importorskip("matplotlib", reason="the plots need matplotlib (pip install 'pytest-ptxbench[report]')")
    out = tmp_path / "report"
    assert main(["report", str(none), str(every), "--out", str(out)]) == 0
    images = Images()
    images.feed((out / "report.html").read_text())
    assert len(images.sources) == 4
