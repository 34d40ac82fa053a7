"""`netdp reproduce --publish DIR --to DEST`: the --all page copied within its budget, every kept link resolving.

The folder published is a real `reproduce_all` output over two small reproductions whose audits are
pages with one figure each (random pixels, so that PNG cannot compress them), sized so that the
budget holds some audit pages and not others.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

from coordinator_tools.cli import main
from coordinator_tools.reproduce.command import reproduce_all
from coordinator_tools.reproduce.outcome import Context, Outcome, Reproduction, Row
from coordinator_tools.reproduce.publish import AUDIT_IMAGE_WIDTH, MEGABYTE, publish

AUDITS = 4  # per reproduction
WIDTH, HEIGHT = 1000, 250  # an audit figure's pixels: about 0.75 MB as PNG, about 0.31 MB at 640 wide
LINK = re.compile(r"(?:href|src)=['\"]([^'\"#]+)['\"]")


def fake_run(ctx: Context) -> Outcome:
    """AUDITS audit pages, each showing one figure and linking its report and pairs, and one page figure."""
    rng = np.random.default_rng(len(ctx.folder.name))
    runs = []
    for index in range(AUDITS):
        audit = ctx.subfolder(f"run{index}/audit")
        (audit / "index.html").write_text("<html><body><h1>audit</h1><p><a href=\"report.json\">report.json</a>, "
                                          "<a href=\"pairs.csv\">pairs.csv</a>, <a href=\"#top\">top</a></p>"
                                          "<figure><img src=\"loss.png\" alt=\"loss by hop\"></figure></body></html>")
        Image.fromarray(rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)).save(audit / "loss.png")
        (audit / "report.json").write_text("{}")
        (audit / "pairs.csv").write_text("u,v\n" * 1000)
        runs += [Path(f"run{index}") / "run", Path(f"run{index}") / "audit"]
    figure = Figure(figsize=(4, 3))
    figure.subplots().plot([0, 1], [1, 0])
    return Outcome(rows=[Row("a quantity", 1.0, 1.0, "eps", 0.1)], figures={"curve": figure}, runs=runs)


def all_folder(root: Path, scale: str = "quick") -> Path:
    known = {name: Reproduction(name, f"paper {name}", "Fig. 1", "a claim", fake_run) for name in ("one", "two")}
    reproduce_all(known, root / "all", scale, seed=3)
    return root / "all"


@pytest.fixture(scope="module")
def shared_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return all_folder(tmp_path_factory.mktemp("shared"))


def links(page: Path) -> list[str]:
    return LINK.findall(page.read_text(encoding="utf-8"))


def test_publish_keeps_what_fits_scales_audit_figures_down_and_every_kept_link_resolves(tmp_path: Path) -> None:
    source, dest = all_folder(tmp_path), tmp_path / "docs" / "full"
    one = Image.open(source / "one" / "run0" / "audit" / "loss.png")
    assert one.width == WIDTH
    budget = 1.5  # MB: the page, tables and two figures (a few tens of kB), then 4 of the 8 audits at ~0.31 MB each
    publication = publish(source, dest, budget)
    assert publication.size <= budget * MEGABYTE
    assert publication.size == sum(path.stat().st_size for path in dest.rglob("*") if path.is_file())
    # audits are taken in turn from both reproductions: the first of each before the second of either
    assert publication.audits[:2] == ("one/run0/audit/index.html", "two/run0/audit/index.html")
    assert len(publication.audits) + len(publication.audits_left_out) == 2 * AUDITS
    assert 0 < len(publication.audits) < 2 * AUDITS
    kept = dest / "one" / "run0" / "audit"
    with Image.open(kept / "loss.png") as small:
        assert small.width == AUDIT_IMAGE_WIDTH and small.height == round(HEIGHT * AUDIT_IMAGE_WIDTH / WIDTH)
    assert not (kept / "report.json").exists() and not (kept / "pairs.csv").exists()
    assert not (dest / "one" / "run0" / "run").exists()
    # every relative link left in a published page resolves; the others became text marked not published
    pages = [dest / "index.html", *(dest / audit for audit in publication.audits)]
    for page in pages:
        for target in links(page):
            assert (page.parent / target).is_file(), (page, target)
    audit_page = (kept / "index.html").read_text(encoding="utf-8")
    assert "report.json (not published)" in audit_page and "pairs.csv (not published)" in audit_page
    assert "href=\"#top\"" in audit_page  # an anchor on the same page is kept
    page = (dest / "index.html").read_text(encoding="utf-8")
    left = publication.audits_left_out[0].rsplit("/", 1)[0].split("/", 1)[1]  # the page's link text, e.g. run3/audit
    assert f"{left} (not published)" in page
    assert "<b>Quick scale</b>" in page and f"{len(publication.audits)} of {2 * AUDITS} audit pages" in page
    summary = json.loads((dest / "summary.json").read_text(encoding="utf-8"))
    assert summary["published"]["audit_pages"] == len(publication.audits)
    assert summary["published"]["audit_pages_left_out"] == list(publication.audits_left_out)
    assert summary["stamp"] == json.loads((source / "summary.json").read_text(encoding="utf-8"))["stamp"]
    for name in ("one", "two"):
        assert (dest / name / "result.json").read_bytes() == (source / name / "result.json").read_bytes()
        assert (dest / name / "curve.png").read_bytes() == (source / name / "curve.png").read_bytes()


def test_a_larger_budget_keeps_every_audit_and_an_earlier_publication_is_replaced(tmp_path: Path) -> None:
    source, dest = all_folder(tmp_path, scale="full"), tmp_path / "published"
    first = publish(source, dest, 1.5)
    assert main(["reproduce", "--publish", str(source), "--to", str(dest), "--max-mb", "8"]) == 0
    summary = json.loads((dest / "summary.json").read_text(encoding="utf-8"))
    assert summary["published"]["audit_pages"] == 2 * AUDITS > len(first.audits)
    assert summary["published"]["audit_pages_left_out"] == []
    page = (dest / "index.html").read_text(encoding="utf-8")
    assert "not published)" not in page.split("</h1>", 1)[1].split("</p>", 1)[1]  # only the banner says it
    assert "Quick scale" not in page and f"{2 * AUDITS} of {2 * AUDITS} audit pages" in page


@pytest.mark.parametrize(("argv", "message"), [
    (["--publish", "{source}"], "argument --publish: give --to DEST"),
    (["--publish", "{tmp}", "--to", "{tmp}/out"], "holds no summary.json and index.html"),
    (["--publish", "{source}", "--to", "{source}/docs"], "argument --to: {source}/docs lies inside {source}"),
    (["--publish", "{source}", "--to", "{tmp}/busy"], "argument --to: {tmp}/busy holds files that are not a "
                                                       "published page"),
    (["--publish", "{source}", "--to", "{tmp}/out", "--max-mb", "0.01"], "argument --max-mb: the page, summary.json"),
    (["--to", "{tmp}/out", "--all"], "argument --to: goes with --publish DIR"),
])
def test_bad_publish_arguments_are_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        shared_source: Path, argv: list[str], message: str) -> None:
    source = shared_source
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    names = {"source": str(source), "tmp": str(tmp_path)}
    assert main(["reproduce", *(token.format(**names) for token in argv)]) == 2
    assert message.format(**names) in capsys.readouterr().err
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine" and not (tmp_path / "out").exists()
