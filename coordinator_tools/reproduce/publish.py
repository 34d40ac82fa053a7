"""`netdp reproduce --publish DIR --to DEST`: the page over `--all` copied into the docs tree within a size budget.

The page a referee cites must be served with the docs, but an `--all` folder holds every run and
audit (gigabytes at full scale). Publishing keeps what the page shows, in the same relative layout
so that its links still resolve: the page, summary.json, every reproduction's result.json,
table.csv and figures, and as many per-run audit pages (each with the figures it shows) as the
budget leaves room for, taken in turn from every reproduction. A figure larger than it needs to be
is scaled down; a link to anything left behind (runs, pairs files, report.json, audit pages past the
budget) becomes plain text marked "not published"; and the page says at its top what was left out
and why, and, at quick scale, that the full-scale page is the one to cite.
"""

from __future__ import annotations

import io
import json
import posixpath
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from PIL import Image

from coordinator_tools.reproduce.page import PAGE_FILE, SUMMARY_FILE, modified_note
from coordinator_tools.reproduce.result import ReproductionResult
from node.errors import ConfigError

DEFAULT_BUDGET_MB = 8.0
MEGABYTE = 1_000_000
PAGE_IMAGE_WIDTH = 1200  # px: the page's own figures, scaled down only past this width (the page is 1200 px wide)
AUDIT_IMAGE_WIDTH = 640  # px: an audit page's figures, a secondary view, scaled down past this width
PUBLISHED_KEY = "published"  # summary.json's block naming what was copied (and what marks DEST as a publication)
# <a href='...'>text</a> and <img ... src='...' ...>, as the page and the audit pages write them.
ANCHOR = re.compile(r"<a\s+href=(['\"])(?P<target>[^'\"]*)\1[^>]*>(?P<text>.*?)</a>", re.DOTALL)
IMAGE = re.compile(r"<img\s[^>]*?src=(['\"])(?P<target>[^'\"]*)\1[^>]*>")
ALT = re.compile(r"alt=(['\"])(?P<alt>[^'\"]*)\1")
HEADING_END = "</h1>"


@dataclass(frozen=True)
class Publication:
    """What `publish` copied: files by their path under DEST (those scaled down apart), audit pages kept and left
    out, and the bytes written (summary.json included) against the budget."""

    files: tuple[str, ...]
    scaled: tuple[str, ...]
    audits: tuple[str, ...]
    audits_left_out: tuple[str, ...]
    size: int
    budget: int


@dataclass
class _Plan:
    """The copies decided so far, within `budget` bytes: path -> bytes to write (None: copy the file as it is)."""

    budget: int
    contents: dict[str, bytes | None] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    scaled: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(self.sizes.values())

    def add(self, items: Mapping[str, tuple[bytes | None, int]], scaled: Iterable[str] = ()) -> bool:
        """Take `items` (path -> (contents, size)) if they fit in the budget with what is taken already."""
        new = {path: item for path, item in items.items() if path not in self.contents}
        if self.size + sum(size for _, size in new.values()) > self.budget:
            return False
        for path, (contents, size) in new.items():
            self.contents[path], self.sizes[path] = contents, size
        self.scaled += [path for path in scaled if path in new]
        return True


def publish(source: Path, dest: Path, budget_mb: float = DEFAULT_BUDGET_MB) -> Publication:
    """Copy the page `netdp reproduce --all` wrote in `source` into `dest` (new, empty, or an earlier publication,
    which is replaced), at most `budget_mb` megabytes in all."""
    source, dest = Path(source), Path(dest)
    if not budget_mb > 0:
        raise ConfigError(f"argument --max-mb: expected a size in megabytes above 0, got {budget_mb:g}")
    summary = _summary(source)
    _check_destination(source, dest)
    entries: Sequence[Mapping[str, Any]] = summary["reproductions"]
    audits = _in_turn([[str(link) for link in entry["audits"]] for entry in entries])
    # room for the page and summary.json, rewritten last: the page grows by its banner, the summary by its block
    reserve = 2 * ((source / PAGE_FILE).stat().st_size + (source / SUMMARY_FILE).stat().st_size) + 100 * len(audits)
    plan = _Plan(budget=int(budget_mb * MEGABYTE) - reserve)
    core: dict[str, tuple[bytes | None, int]] = {}
    scaled: list[str] = []
    for entry in entries:
        name = str(entry["name"])
        for path in (f"{name}/result.json", f"{name}/table.csv"):
            core[path] = (None, (source / path).stat().st_size)
        for figure in ReproductionResult.read(source / name / "result.json").figures:
            core[f"{name}/{figure}"] = _image(source, f"{name}/{figure}", PAGE_IMAGE_WIDTH, scaled)
    if not plan.add(core, scaled):
        need = sum(size for _, size in core.values()) + reserve
        raise ConfigError(f"argument --max-mb: the page, summary.json and the reproductions' figures and tables of "
                          f"{source} need {need / MEGABYTE:.1f} MB, over {budget_mb:g}")
    kept: list[str] = []
    left_out: list[str] = []
    for audit in audits:
        unit, unit_scaled = _audit_unit(source, audit)
        (kept if unit is not None and plan.add(unit, unit_scaled) else left_out).append(audit)
    published = set(plan.contents)
    page = _rewrite(_read(source, PAGE_FILE), "", published).replace(
        HEADING_END, HEADING_END + _banner(summary, len(kept), len(left_out), plan.scaled, budget_mb), 1)
    _reset(dest)
    for path, contents in plan.contents.items():
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if contents is None:
            shutil.copyfile(source / path, target)
        elif path.endswith(".html"):
            target.write_text(_rewrite(contents.decode("utf-8"), posixpath.dirname(path), published),
                              encoding="utf-8")
        else:
            target.write_bytes(contents)
    (dest / PAGE_FILE).write_text(page, encoding="utf-8")
    block = {"budget_bytes": int(budget_mb * MEGABYTE), "figures_scaled_down": plan.scaled,
             "audit_pages": len(kept), "audit_pages_left_out": left_out,
             "not_published": "the runs, their data, and every audit's pairs files and report.json (and the audit "
                              "pages past the budget): the folder `netdp reproduce --all` wrote holds them"}
    (dest / SUMMARY_FILE).write_text(json.dumps({**summary, PUBLISHED_KEY: block}, indent=2) + "\n",
                                     encoding="utf-8")
    files = (*sorted(plan.contents), PAGE_FILE, SUMMARY_FILE)
    return Publication(files=files, scaled=tuple(plan.scaled), audits=tuple(kept), audits_left_out=tuple(left_out),
                       size=sum((dest / path).stat().st_size for path in files), budget=int(budget_mb * MEGABYTE))


def _summary(source: Path) -> dict[str, Any]:
    """summary.json of an `--all` folder; a folder without one (or without its page) is refused."""
    path = source / SUMMARY_FILE
    if not path.is_file() or not (source / PAGE_FILE).is_file():
        raise ConfigError(f"argument --publish: {source} holds no {SUMMARY_FILE} and {PAGE_FILE}: give the folder "
                          "`netdp reproduce --all --out DIR` wrote")
    summary: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if PUBLISHED_KEY in summary:
        raise ConfigError(f"argument --publish: {source} is a published copy already: give the folder "
                          "`netdp reproduce --all --out DIR` wrote")
    return summary


def _check_destination(source: Path, dest: Path) -> None:
    """DEST must be new, empty, or an earlier publication (its summary.json has a `published` block)."""
    if dest.resolve() == source.resolve() or source.resolve() in dest.resolve().parents:
        raise ConfigError(f"argument --to: {dest} lies inside {source}: give a folder outside it")
    if not dest.exists() or (dest.is_dir() and not any(dest.iterdir())):
        return
    summary = dest / SUMMARY_FILE
    earlier = summary.is_file() and PUBLISHED_KEY in json.loads(summary.read_text(encoding="utf-8"))
    if not earlier:
        raise ConfigError(f"argument --to: {dest} holds files that are not a published page: give a new or empty "
                          "folder (an earlier publication is replaced)")


def _reset(dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)


def _in_turn(lists: Sequence[Sequence[str]]) -> list[str]:
    """The lists' items taken in turn, first items first: every reproduction gets its first audit pages before
    any gets its later ones."""
    return [items[index] for index in range(max(map(len, lists), default=0)) for items in lists if index < len(items)]


def _audit_unit(source: Path, page: str) -> tuple[dict[str, tuple[bytes | None, int]] | None, list[str]]:
    """An audit page with the figures it shows (scaled down past AUDIT_IMAGE_WIDTH), or None without its page."""
    if not (source / page).is_file():
        return None, []
    html = _read(source, page).encode("utf-8")
    unit: dict[str, tuple[bytes | None, int]] = {page: (html, len(html))}
    scaled: list[str] = []
    folder = posixpath.dirname(page)
    for match in IMAGE.finditer(html.decode("utf-8")):
        path = _resolve(folder, match["target"])
        if path is not None and (source / path).is_file():
            unit[path] = _image(source, path, AUDIT_IMAGE_WIDTH, scaled)
    return unit, scaled


def _image(source: Path, path: str, width: int, scaled: list[str]) -> tuple[bytes | None, int]:
    """A PNG as it is, or scaled down to `width` pixels (the aspect kept) when wider and smaller so."""
    original = (source / path).stat().st_size
    if not path.lower().endswith(".png"):
        return None, original
    try:
        opened = Image.open(source / path)
    except Image.DecompressionBombError as error:
        raise ConfigError(f"argument --publish: {path} is too large an image to publish ({error}); redraw it "
                          "(`netdp audit --force` on its run) and publish again") from None
    with opened as image:
        if image.width <= width:
            return None, original
        small = image.resize((width, max(1, round(image.height * width / image.width))), Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    small.save(buffer, format="PNG", optimize=True)
    contents = buffer.getvalue()
    if len(contents) >= original:
        return None, original
    scaled.append(path)
    return contents, len(contents)


def _read(source: Path, path: str) -> str:
    return (source / path).read_text(encoding="utf-8")


def _resolve(folder: str, target: str) -> str | None:
    """A link's target as a path under the published root, or None for one that leaves the folder (another site,
    an anchor on the same page, an absolute path)."""
    if not target or target.startswith(("#", "/")) or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
        return None
    path = posixpath.normpath(posixpath.join(folder, target.split("#", 1)[0]))
    return None if path.startswith("..") else path


def _rewrite(html: str, folder: str, published: set[str]) -> str:
    """`html` (a page in `folder`) with every link and image to a file not in `published` made plain text."""
    def anchor(match: re.Match[str]) -> str:
        path = _resolve(folder, match["target"])
        if path is None or path in published:
            return match[0]
        return f"<span class='unpublished' title='not published'>{match['text']} (not published)</span>"

    def image(match: re.Match[str]) -> str:
        path = _resolve(folder, match["target"])
        if path is None or path in published:
            return match[0]
        alt = ALT.search(match[0])
        return f"<span class='unpublished'>[figure {alt['alt'] if alt else match['target']}: not published]</span>"

    return IMAGE.sub(image, ANCHOR.sub(anchor, html))


def _banner(summary: Mapping[str, Any], kept: int, left_out: int, scaled: Sequence[str], budget_mb: float) -> str:
    """What the published copy holds and leaves out, and at quick scale which page to cite instead."""
    stamp, scale = summary["stamp"], escape(str(summary["scale"]))
    quick = summary["scale"] != "full"
    cite = ("<b>Quick scale</b>: smaller graphs, fewer nodes, rounds and seeds than the papers, made in minutes. "
            "The page to cite is the full-scale one (<code>netdp reproduce --all --scale full</code>), made with the "
            "papers' sizes. " if quick else "")
    command = f"netdp reproduce --all --scale {scale} --seed {summary['seed']}"
    return (f"<p style='border:2px solid {'#c00' if quick else '#999'};padding:.5em'>{cite}Published copy of what "
            f"<code>{command}</code> wrote at commit <code>{escape(str(stamp['commit']))}</code>"
            f"{modified_note(stamp)} on "
            f"{escape(str(stamp['machine']))}, within {budget_mb:g} MB: {kept} of {kept + left_out} audit pages"
            + (f" ({left_out} left out for size, their links marked not published)" if left_out else "")
            + (f", {len(scaled)} figures scaled down" if scaled else "")
            + "; the runs, their data, and every audit's pairs files and report.json are not published (the folder "
              "holds them, and every section's command reruns its reproduction).</p>")
