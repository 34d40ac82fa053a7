"""The audit report (`report.json`, and a plan's file) as pydantic models: what `build_report` writes and readers load.

Every key of the document is a field here, with the sentence SCHEMA.md gives it: SCHEMA.md is generated from these
models (`python -m coordinator_tools.audit.schema_doc`), so the code and its documentation cannot drift apart.
Blocks a protocol fills in its own way (`run`, `replay`, `token_walk`, ...) are open models: their common keys are
typed, the rest pass through as the protocol wrote them, since a plug-in protocol adds its own. A class docstring is
the prose SCHEMA.md prints for its block.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = "netdp.audit.report/5"
# A report number: a JSON number, "inf" (or "-inf") for an infinite loss, None for no value.
JsonNumber = float | str | None


class Closed(BaseModel):
    """A block whose keys are all listed: an unknown key is an error, not a silent typo."""

    model_config = ConfigDict(extra="forbid")


class Open(BaseModel):
    """A block a protocol fills: its listed keys are typed, a protocol's own keys pass through unchanged."""

    model_config = ConfigDict(extra="allow")


class RunSection(Open):
    r"""
    ### `run`

    Every protocol: `protocol`, `run_id`, `topology_digest`, `graph`, `n`.

    * muffliato: `rounds` (T), `accelerated`, `rounds_completed` (per node), `messages_used`
      (values mixed in, summed over nodes and rounds) and `messages_planned` (the same with no
      drop-out).
    * muffliato-async (audit): `activation` (`"weights"` or `"uniform"`), `rounds_completed` (ticks
      per node), `exchanges`: `{committed, half_applied, declined, aborted}` counts.
    * muffliato-async (plan): `activation`, `schedules` (how many simulated schedules the ex-ante
      numbers average over), `ticks_per_node` (or `null`) and `duration_s` (or `null`), as published,
      and `mean_exchanges` per schedule.
    * ring-sum, walk-sum: `contributions_planned` (K·n, or T) and `cycles` with `noise_placement`
      (ring-sum) or `steps` (walk-sum), as published; an audit adds `contributions` (made),
      `noisy_contributions` and `visits` (per node); a walk-sum plan adds `walks` (simulated) and
      `mean_visits` (per node).

    """

    protocol: str = Field(description="the run's protocol")
    run_id: str = Field(description="the run's id, from the published topology")
    topology_digest: str = Field(description="digest of the published topology the run used")
    graph: str = Field(description="the graph's shape")
    n: int = Field(description="number of nodes")


class PairsListed(Closed):
    """What `pairs` lists, so that a reader never takes a few pairs for all of them."""

    count: int = Field(description="how many pairs `pairs` lists")
    of: int = Field(description="how many ordered pairs the run has, n(n − 1)")
    which: str = Field(description='`"all"`, or the largest first')


class PairsFile(Closed):
    r"""
    ### The pairs file

    `pairs_file` points to it, relative to the document's folder:

    ```json
    {"file": "pairs.parquet", "format": "parquet", "rows": 56, "row_group_rows": 262144,
     "columns": ["source", "observer", "hop_distance", "paper_rdp", "...", "ex_ante_eps"], "csv": "pairs.csv"}
    ```

    `rows` is n(n − 1); `columns` lists the file's columns in order; `csv` names the CSV export, or is
    `null` when none was written. Rows are ordered by source, then observer; each row group holds
    whole sources, at most `row_group_rows` rows. Read it with any Parquet reader, or with
    `coordinator_tools.audit.pairs_file.read_pairs(folder)` (numpy columns, null as NaN).

    Columns, in order (`source`, `observer`, `hop_distance`: int32; the four flags: bool; the others
    float64, null where the protocol has no such value): `source, observer, hop_distance, paper_rdp,
    paper_eps, exact_rdp, exact_eps, exact_rdp_upper, exact_eps_upper, exact_rdp_lower, exact_eps_lower,
    exact_reconstructable, exact_ill_conditioned, empirical_eps_lower, model_attack_eps_lower, ldp_rdp, ldp_eps,
    paper_undercounts, paper_corrected_rdp, paper_corrected_eps, paper_corrected_undercounts, realized_path_rdp,
    realized_path_eps, ex_ante_rdp, ex_ante_eps, ex_ante_rdp_upper, ex_ante_eps_upper, linearized_rdp,
    linearized_eps, linearized_rdp_upper, linearized_eps_upper`, then a protocol's own
    columns (rw-sgd: `communicability`; ring-histogram: `exact_enumeration_size`). The CSV has the same
    columns in the same order.

    * `hop_distance`: shortest path in the published graph (null if unreachable).
    * `paper_*`: Muffliato Thm 1 on the realized schedule (muffliato: plain products of the realized
      W_t, even for accelerated runs; muffliato-async: the realized single-edge averaging matrices
      W_t = I − (e_v − e_w)(e_v − e_w)ᵀ/2, Cor. 1 / Thm 4; ring-sum and walk-sum: PAbD Thm 1 / Thm 3,
      `paper_rdp` null, see "Token walks"). Where the closed form is a Gaussian μ per pair (every Muffliato
      variant), `paper_eps` is that μ's ε by the exact Gaussian privacy profile (the averaged profile in a
      plan over simulated schedules), the exact column's own conversion: ε increases with μ, so both
      compare on one basis and a pair below the exact loss in RDP is below it in ε too. Converting the RDP
      curve α μ²/2 by the tight RDP conversion instead can give the smaller μ the larger ε and make an
      undercounted pair look safe. `--conversion paper` gives the paper's own classic ε = rdp + ln(1/δ)/(α − 1)
      at α, to reproduce published figures; that ε is on another basis than `exact_eps`
      (`summary.paper_conversion` says which, the notes, page and figure label say so).
    * `exact_*`: the exact Gaussian divergence of v's whole view, from the run's linear-Gaussian model
      (one column per input and per noise draw), as an interval. `exact_rdp_upper`/`exact_eps_upper`
      is a proven upper bound: rounding included (near machine precision). `exact_rdp_lower`/`exact_eps_lower`
      is a value the view reaches (the standard rank tolerance). Both are equal (to rounding) when the
      method is `rational`; otherwise the interval is what is known. `exact_rdp`/`exact_eps` are
      the upper end (the number every check, flag, summary, figure and the console lead with).
      `exact_reconstructable`: v can solve for u's noisy input (defined when every node draws its
      noise once; `false` for other models). `exact_ill_conditioned`: the tolerance changed the answer.
      Learning runs (muffliato-gd, rw-sgd) differ: their gradients depend on models that carry hidden
      noise, so no linear-Gaussian model of the view is exact; their `exact_*_upper` is the proven bound
      of "Learning runs" below, `exact_*_lower` is null (no value the view is proven to reach: every
      check reads a null lower end as no evidence), `exact_reconstructable` and `exact_ill_conditioned`
      are `false`, and `summary.exact_method` is `"reachable steps"`.
    * `linearized_*` (learning runs only): the view's matrix-factorization value with every node's
      per-step gradient a fixed input, u's moved by at most Δ per step, the worst case over the steps'
      directions in R^D (D the model's dimension), the regulariser's damping (1 − ηλ) in the rows: a
      certified interval *of that model*, `linearized_rdp`/`linearized_eps` a value real directions
      reach in it, `linearized_rdp_upper`/`linearized_eps_upper` proven for it by weak duality (they
      meet when steps in one direction are the worst case, for scalar gradients over at most 12 steps,
      and for D ≥ r with r(r + 1)/2 > T). It is exact for gradients that do not depend on the model and
      the worst case for a view that holds every node's noisy step (2 nodes, local DP), but for a run
      seen in part it is neither an upper nor a lower bound (path v – u – w, T = 2, step 1/L: 1.9 against
      a true 2 for u → v, 0.1 against 0 for w → v; a walk [v, w, u, v]: 1/2 against 1, in units of
      αΔ²/(2σ²)). Read `exact`.
    * `empirical_eps_lower`: the real run tested. Non-null **only** in a run that planted canaries (`canaries`
      above), for the pairs its canary audit bounded: a lower bound on ε from the one-run audit of Steinke, Nasr &
      Jagielski (NeurIPS 2023) on the run itself. Each node put (Δ/2)·s_i in canary coordinate i of every
      contribution (s_i its secret fair sign, in its private log only); observer v scores each canary of u from the
      canary coordinates of the payloads in its *logged view* (never a private log): the likelihood-ratio direction
      of u's canary against the noise and every other node's canaries, what v knows itself projected out, plus any
      value outside the model; it guesses the k highest and k lowest scores (k chosen on a pilot simulated from the
      model, independent of the run), and Steinke et al.'s p-value turns the right guesses into ε_lower, all pairs'
      bounds holding together at 95% (Bonferroni). A node that drew less noise, or sent what it should not have,
      moves these bounds whatever the model says.
    * `model_attack_eps_lower`: a self-check of the arithmetic, non-null **only** for pairs the model attack ran on:
      the audit's own linear-Gaussian model replayed with fresh simulated noise (averaging protocols and token
      walks: the repeated-replay attack with Clopper–Pearson bounds; learning protocols: canaries simulated on the
      linearized model, with Steinke et al.'s p-value); all attacked pairs' bounds holding together at 95%. It
      cannot see a run that differs from the model.
    * `ldp_*`: the local-DP loss of u's noisy value (the same for every pair); token walks: every
      contribution of u seen directly, each a Gaussian release at σ (ring-sum: K of them; walk-sum:
      u's realized visits, so it depends on u).
    * `paper_undercounts`: `paper_rdp < exact_rdp` (a finding about the closed form, not an error);
      where the closed form states no RDP (`paper_rdp` null: ring-sum, walk-sum), `paper_eps < exact_eps`.
      Where the exact column is a proven upper bound and not the loss (learning runs,
      `summary.paper_undercounts.exact_is_bound`), a flagged pair is only below that bound: no evidence
      that the closed form undercounts.
    * `paper_corrected_*` (muffliato-gd only, one gossip round per step): the corrected closed form of
      20-accounting.md, (αΔ²/2σ²)·min(T, Σ_{s<T} (T − s) Σ_{w ∈ N[v]} (W^s)²_{w,u}/‖(W^s)_w‖²) on the
      realized graphs, which counts u's noisy gradient in the later steps' messages and is capped at the
      local-DP value T·αΔ²/(2σ²) (composition of u's T releases); evidence-backed, not a proven bound.
      Its ε by the same conversion as `paper_eps`. `paper_corrected_undercounts`: `paper_corrected_rdp <
      exact_rdp`, as `paper_undercounts` (null for protocols without a corrected form).
    * `realized_path_*`, `ex_ante_*` (rw-sgd only): the walk that ran, by amplification by iteration,
      and that bound averaged over simulated walks (see the rw-sgd section); `ex_ante_rdp_upper` /
      `ex_ante_eps_upper` are the upper end of each pair's confidence interval around that estimate:
      lead with them.
    * `communicability` (rw-sgd only): the graph's expm(A)[u, v], drawn beside the losses.

    """

    file: str = Field(description="the Parquet file, relative to the document's folder")
    format: Literal["parquet"] = Field(description='`"parquet"`')
    rows: int = Field(description="n(n − 1)")
    row_group_rows: int = Field(description="the most rows a row group holds (each holds whole sources)")
    columns: list[str] = Field(description="the file's columns, in order")
    csv: str | None = Field(description="the CSV export, or null when none was written")


class RdpEps(Closed):
    """One loss in both units."""

    rdp: JsonNumber = Field(description="Rényi divergence at the report's `alpha`")
    eps: JsonNumber = Field(description="ε at the report's `delta`")


class Baselines(Closed):
    """The local-DP and central-DP losses at the run's noise."""

    ldp: RdpEps = Field(description="u's noisy value seen directly (token walks: the worst source's)")
    central: RdpEps = Field(description="the sum released with everyone's noise")


class MaxMean(Closed):
    """The observer with the largest per-observer mean of a column."""

    observer: int | None = Field(description="that observer (null when the column has no value)")
    rdp: JsonNumber = Field(description="its mean")


class ColumnDistribution(Closed):
    """One float column of the pairs file over the pairs with a value."""

    count: int = Field(description="pairs with a value")
    mean: JsonNumber = Field(description="their mean")
    min: JsonNumber = Field(description="the smallest value")
    max: JsonNumber = Field(description="the largest value")
    quantiles: list[JsonNumber] = Field(description="values that occur (inverted CDF) at `summary.quantile_levels`")


class TopPair(Closed):
    """One of the pairs with the largest exact ε (upper end)."""

    source: int = Field(description="u, whose data")
    observer: int = Field(description="v, whose view")
    hop_distance: int | None = Field(description="shortest path in the published graph (null: unreachable)")
    exact_rdp_upper: JsonNumber = Field(description="the exact RDP's upper end")
    exact_eps_upper: JsonNumber = Field(description="the exact ε's upper end")
    paper_rdp: JsonNumber = Field(description="the paper's closed form in RDP")
    paper_eps: JsonNumber = Field(description="the paper's closed form in ε")


class UndercountPair(Closed):
    """A pair where a closed form is below the exact loss."""

    source: int = Field(description="u, whose data")
    observer: int = Field(description="v, whose view")
    exact_over_paper: JsonNumber = Field(description="the exact loss's upper end over the closed form")


class HopCount(Closed):
    """How many pairs at one hop distance a closed form undercounts."""

    hop_distance: int = Field(description="the hop distance")
    count: int = Field(description="pairs at that distance below the exact loss")
    of: int = Field(description="pairs at that distance")


class Undercounts(Closed):
    """Where one closed form is below the exact loss."""

    count: int = Field(description="pairs below the exact loss")
    pairs: list[UndercountPair] = Field(description="at most 20 of them, largest ratio first")
    by_hop_distance: list[HopCount] = Field(description="per hop distance some pair has")
    exact_given: str | None = Field(description="what the exact column is conditioned on that the observer is not "
                                                "told, or null")
    exact_is_bound: bool = Field(description="the exact column is a proven upper bound, not the loss itself")


class ModelAttackLimit(Closed):
    """The largest ε the model's replay attack can certify."""

    eps: JsonNumber = Field(description="that ε, at `delta`")
    replays: int = Field(description="replays per hypothesis")
    pairs: int = Field(description="pairs attacked, whose bounds hold together")
    confidence: float = Field(description="confidence of all bounds together")


class Sampler(Closed):
    """Which noise sampler each node ran."""

    nodes_by_kind: dict[str, list[int]] = Field(description='`{"secure": [ids], "simulation": [ids]}`')
    simulation: bool = Field(description="some node ran the seeded simulation sampler: an experiment, not a "
                                         "deployment")
    note: str | None = Field(description="says so in words when `simulation` is true")


class Summary(Closed):
    r"""
    ### `summary`

    """

    exact_method: str = Field(description=(
        '`"rational"` (exact arithmetic), `"float-interval"`, `"float-interval (general)"` (a model with '
        'several draws per node or unequal noise), or `"reachable steps"` (learning runs: the proven bound of'
        ' "Learning runs")'
    ))
    mean_rdp_per_observer: dict[str, list[JsonNumber]] = Field(description=(
        "`{paper, exact, exact_upper, exact_lower, ldp}` (`exact` = `exact_upper`; `exact_lower` all null for"
        " learning runs) (and `paper_corrected` and a protocol's own columns, where the run has them, an "
        "interval's upper end `<name>_upper` before it: muffliato-gd `linearized_upper, linearized`, rw-sgd "
        "`realized_path, ex_ante_upper, ex_ante, linearized_upper, linearized`): for each observer v, (1/n) "
        "Σ_{u≠v} of that column (Muffliato Eq. 7's normalisation: the sum over the n − 1 sources u ≠ v, "
        "divided by n, so the `ldp` mean is (n − 1)/n of the baseline), a list indexed by v"
    ))
    mean_eps_per_observer: dict[str, list[JsonNumber]] = Field(description=(
        "the same means of the `eps` columns (each pair's ε at `delta`, then averaged the same way)"
    ))
    max_mean_rdp: dict[str, MaxMean] = Field(description="per column, `{observer, rdp}` of the largest mean")
    quantile_levels: list[float] = Field(description=(
        "the levels of every `quantiles` list below: 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99"
    ))
    pair_columns: dict[str, ColumnDistribution] = Field(description=(
        "per float column of the pairs file that has a value: `{count, mean, min, max, quantiles}` over the "
        "pairs with a value (`count` of them); quantiles are values that occur (inverted CDF), so an infinite"
        ' loss shows as `"inf"`'
    ))
    top_pairs: list[TopPair] = Field(description=(
        "the 20 pairs with the largest `exact_eps_upper`, largest first: `{source, observer, hop_distance, "
        "exact_rdp_upper, exact_eps_upper, paper_rdp, paper_eps}`"
    ))
    paper_conversion: Literal["tight", "paper"] | None = Field(description=(
        "how `paper_eps` (and `paper_corrected_eps`) came from the closed form's per-pair μ: `\"tight\"` (the "
        "default: the exact Gaussian profile, the exact column's own conversion, one basis), `\"paper\"` "
        "(`--conversion paper`: the paper's classic conversion at α, not the exact column's basis; compare in"
        " RDP), or `null` (a closed form stated in (ε, δ), or one its protocol converts by its own rule: "
        "token walks, personalized-cd, rw-sgd)"
    ))
    paper_undercounts: Undercounts | None = Field(description=(
        "`{count, pairs, by_hop_distance, exact_given, exact_is_bound}`; `pairs` lists at most 20 `{source, "
        "observer, exact_over_paper}` (the exact loss's upper end over the paper bound), largest ratio first "
        "(a ratio of eps where the paper states no RDP); every one is flagged in the pairs file's "
        "`paper_undercounts` column. `by_hop_distance`: `{hop_distance, count, of}` for every hop distance "
        "some pair has (`of`: the pairs at that distance; unreachable pairs are in none). `exact_given` is "
        "`null`, or what the exact column is conditioned on that the observer is not told (walk-sum, rw-sgd: "
        '`"the realized path"`, in a plan `"the path"`): the bound is then ex ante over it, and a pair below '
        "the exact loss says that an observer told the path would learn more, not that the bound undercounts "
        "what the observer learns. `exact_is_bound` is `true` where the exact column is a proven upper bound "
        "and not the loss itself (learning runs): a pair below it is no evidence of an undercount, and the "
        "page says so in a plain sentence, not a warning"
    ))
    paper_corrected_undercounts: Undercounts | None = Field(description=(
        "the same for `paper_corrected` (flagged in `paper_corrected_undercounts`); `null` where the protocol"
        " has no corrected form"
    ))
    reconstructable_pairs: int = Field(description=(
        "count of the reconstructable pairs: a reconstructable pair is one whose observer's received "
        "combinations determine the source's noisy input x_u + η_u, so its loss is exactly local DP"
    ))
    ill_conditioned_pairs: int = Field(description="count of the pairs where the rank tolerance changed the answer")
    attacked_pairs: int = Field(description="count of the pairs the model attack ran on")
    model_attack_limit: ModelAttackLimit | None = Field(description=(
        "`null` unless the model's replay attack ran (averaging protocols and token walks; not the simulated "
        "canaries): `{eps, replays, pairs, confidence}`, the largest ε the attack can certify with `replays` "
        "replays per hypothesis at `delta`, its `pairs` bounds holding together at `confidence`: its own "
        "Clopper–Pearson bound with the held-out half perfectly separated. A `model_attack.eps_lower` at this"
        ' limit means "at least the limit", whatever the exact loss'
    ))
    canary_pairs: int = Field(description="count of the pairs the real run's canaries bounded (the `empirical` column)")
    sampler: Sampler | None = Field(description=(
        '`null` for a plan; else `{nodes_by_kind: {"secure": [ids], "simulation": [ids]}, simulation, note}`.'
        " `simulation: true` marks the results as coming from the seeded simulation sampler (an experiment, "
        "not a deployment)"
    ))


class CheckResult(Closed):
    r"""
    ## Checks

    Loss invariants (tolerance: relative 1e-9 plus 1e-12):

    A pair whose exact loss was not computed (null: an enumeration refused up front, see "Ring
    histogram") is no evidence either way: it is left out of every check, and a check that holds on
    the other pairs says how many were not computed and is a `"warning"`, never a `"pass"`.

    * `empirical lower bound <= exact (eps)`: every pair the run's canaries bounded: `empirical.eps_lower ≤
      exact.eps_upper` (runs with canaries only). A failure means the run leaked more than the audit's model allows
    * `model attack lower bound <= exact (eps)`: every attacked pair: `model_attack.eps_lower ≤ exact.eps_upper`
      (only when the model attack ran; a self-check of the arithmetic)
    * `coalition nodes C: joint exact >= each member's own`: `--colluders` only: for every source u ∉ C, the
      coalition's `exact_rdp_upper` is at least each member's single-observer `exact_rdp_lower`; a source none of
      whose members has a lower end (null) is not checked, and the line is then a `"warning"` saying how many
    * `coalition nodes C: joint exact <= LDP`: `--colluders` only: for every source u ∉ C, the coalition's
      `exact_rdp_upper` is at most u's local-DP RDP
    * `exact <= LDP`: every pair: `exact.rdp_upper ≤ ldp.rdp` and `exact.eps_upper ≤ ldp.eps` (the pair's own
      `ldp`). On ring-sum it can fail for a real reason, not an auditor bug: a node that sees the token before and
      after contributions with less noise than σ each (bare ones under single placement, σ/√n ones under distributed
      placement; the result token gives every node but the last such a view) learns those inputs better than local
      DP at σ would allow; a note names the pairs
    * `exact = LDP where v reconstructs u`: every `reconstructable` pair: `exact.rdp_upper = ldp.rdp` (relative
      1e-6)
    * `paper bound is an upper bound`: always ok; `level: "warning"` when the paper bound, or its corrected form
      where the protocol has one, is below the exact loss on some pair (the detail, for each of them: how many, by
      up to which ratio exact/paper, a few of them), `"pass"` otherwise
    * `paper bound vs exact (a proven upper bound)`: learning runs (muffliato-gd; rw-sgd adds ` given the realized
      path`, its plans ` given the path`), where the exact column is a proven upper bound: always ok and `"pass"` (a
      `"warning"` only for pairs not computed); the detail states, per closed form, on how many pairs it is below
      that bound, as no evidence that it undercounts (the loss itself may lie below both), or that it is at least
      the bound on every pair
    * `paper bound (ex ante) vs exact given <exact_given>`: the same comparison, named for what it compares where
      the exact column is conditioned on what the observer is not told (walk-sum and rw-sgd: `... given the realized
      path`; their plans: `... given the path`): a warning says the bound is below the loss of an observer told the
      path, which is not the same quantity as the bound's
    * `losses do not grow with sigma`: re-accounted at 2σ, no paper or exact column (either end) of any pair grew

    Replay health (audits only):

    * `view logs readable and bound to this run`: no error-level finding about a single log (missing, corrupt
      mid-file, foreign header); a torn tail, which a killed node leaves, is a warning
    * `sent and received records agree across nodes`: no error-level cross-log finding (payload mismatch, delivered
      but not received, received but never sent, rounds that had to be inferred for an intact log, ambiguous rounds)
    * `committed exchanges conserve the sum of values`: muffliato-async, full logs only: for every exchange both
      sides committed, the two values after it add up to the two that crossed (relative 1e-9); with private logs and
      every output present, also Σ outputs = Σ (x + η) plus what half-applied exchanges changed
    * `token history is one unbroken chain`: ring-sum, walk-sum: no error-level token-history finding (below): every
      hop of every token held once, handed over by the holder of the hop before, confirmed by both sides, to the
      token's last hop
    * `every value that reached a node is in the audited model`: no view holds a value in a message the protocol
      does not send (another kind, a stranger's claim), refused or not: such a value reached its receiver and no
      column accounts for it; the detail names sender → receiver
    * `noise in the run's messages is the published noise (canaries)`: runs with canaries: every message's canary
      coordinates minus the canaries it carries (every node's signs known) have the spread the model says: Σ_i
      r_i²/(σ² Σ_k B_k² s_k²) over the M coordinates, χ² with M degrees of freedom, both tails, Bonferroni over the
      messages at 95%; a failure names the worst message and every node whose noise std, fitted to all messages'
      variances (non-negative least squares), is off by more than 10%; pass or fail, the detail names every node
      whose noise no checked message carries as not tested (its values reached nobody, or they carry canaries of
      a node whose private log was not read)
    * `every contribution was clipped (private logs)`: with `--with-private-logs`: the data coordinates of every
      logged private input stay within the protocol's clipping bound (Δ/2 for an input; rw-sgd without a
      regulariser: C for a step's gradient; muffliato-gd: the row below; protocols with no fixed bound, which clip
      in l1 or add a regulariser, have no such check); the detail names the nodes beyond it
    * `transcript reproduces the logged payloads`: with `--with-private-logs`: recomputing every node's values from
      its private input and noise along the transcript (rounds, committed exchanges in causal order, the token's
      hops with each holder's input and draw of that visit, up to a lost token's last hop when its holder died there
      before its draw, muffliato-gd's steps, each opened with θ − η (g + z) from the node's logged gradient and draw
      of that step and followed by its K plain or Chebyshev rounds, or personalized CD's updates, below) gives every
      logged payload, value after an exchange and output (relative 1e-9); the detail names the first three that are
      not reproduced
    * `every contribution was clipped (private logs)` (muffliato-gd): muffliato-gd with `--with-private-logs`: every
      logged step gradient g of every node, at its recomputed model θ, has ‖g − λθ‖₂ ≤ C (the published `clip`,
      relative 1e-9): each example's gradient clipped to C, then averaged, keeps the data part within C, which the
      sensitivity 2C/b (one of b examples replaced) or 2C (the whole local set) rests on, λθ depending on no data;
      the detail gives the count, the largest norm and the first gradient above C

    `netdp audit` exits with status 1 when a check fails; a warning does not fail. Its console summary prints each
    check as `pass`, `FAIL` or `⚠ warning`, the worst observers' means in RDP and ε, and the sentences of the page
    (reconstructed pairs, `combinations`, the empirical column and the model attack, `utility`, stopped nodes).

    """

    name: str = Field(description="the check, named as in the tables above")
    ok: bool = Field(description="it holds (a warning holds too)")
    level: Literal["pass", "fail", "warning"] = Field(description="pass, fail, or a warning that holds")
    detail: str = Field(description="what was found, in words")


class Finding(Closed):
    """One thing the replay noticed about a log, or between logs."""

    severity: Literal["error", "warning", "info"] = Field(description="how much it weighs")
    kind: str = Field(description="a stable tag, listed under Findings")
    node: int | None = Field(description="the node whose log it is about (null: none in particular)")
    detail: str = Field(description="the finding in words")


class ReplayBlock(Open):
    r"""
    ## Replay (`replay`)

    Per-node facts in `replay.nodes[i]`:
    * muffliato: `rounds_completed`, `inferred_rounds`. A node whose log is damaged or missing gets
      the rounds its neighbours' records prove it completed (`inferred_rounds`); its last round is
      provable only by its own output, and since nobody receives x^T, leaving it out changes no view.
    * muffliato-async: `rounds_completed` (ticks of its clock), `exchanges_applied` (exchanges that
      changed its value).
    * ring-sum, walk-sum: `visits` (contributions it made), `values_seen` (distinct token values in
      its view, the result included).

    A node's view is every value that reached it: received, refused with its payload (e.g. a round
    value that arrived after its round closed, a commit that arrived after its exchange was aborted),
    or marked delivered by its sender although its own log lost the record. A refused value is
    compared with the sender's sent payload like a received one.

    ### Findings

    `kind` is a stable tag. About one log (`node_problems`): `missing_log`, `unreadable_log`,
    `torn_tail` (warning), `bad_checksum`, `oversized_length`, `undecodable`, `missing_header`,
    `header_mismatch`, `foreign_log`, `unknown_record_kind` (warning: a record kind this reader does
    not know, skipped), `unexpected_record`, `outside_topology`, `outside_protocol` (a record the
    protocol cannot write; left out), `anonymous_record`, `duplicate_record`,
    `refused_from_stranger` (warning), `equivocation` (a value refused under a MessageId whose value
    the node took or refused already, with another payload: SHA-256 digests differ; it reached the
    node, but only the first value under the id is accounted), `incomplete_private_log`,
    `unknown_node_directory` (warning), `stripping_mismatch` (a record whose payloads disagree with its
    log's header: bytes in a structure-only copy, or a stripped payload in a full log; left out).

    Between logs (`consistency`): `payloads_not_compared` (info, structure-only logs: messages are
    matched by MessageId, fate and payload shape, a `payload_mismatch` then means shapes or sizes
    differ), `payload_mismatch`, `unacknowledged_delivery` (warning),
    `delivered_not_received`, `received_never_sent`, `unverifiable_messages` (info),
    `inferred_received` (info); muffliato: `contradictory_records`, `inferred_rounds`,
    `ambiguous_round`; muffliato-async: `half_applied_exchange` (warning), `ambiguous_exchange`
    (a side's outcome no log settles; accounted as not applied), `open_exchange`,
    `contradictory_exchange`, `missing_exchange_value`, `duplicate_sequence`,
    `exchange_order_cycle`; ring-sum and walk-sum (prefixed by the token id): `missing_hop` (no log
    shows who took a hop a later one proves taken, or a node logged a hop's value without its
    custody record), `duplicate_hop` (a hop taken twice: two nodes, one node twice, or an
    acknowledged forward to another node than its holder), `unmatched_forward` (an acknowledged
    forward the receiver's intact log never took), `unmatched_receive` (a hop taken from a node
    whose intact log never forwarded it there), `broken_chain` (taken from, or kept by, a node that
    did not hold the hop before), `wrong_predecessor` and `wrong_holder` (ring-sum: not from the
    taker's ring predecessor, not at the ring's node), `token_lost` (the history stops before the
    token's last hop), `inferred_hop` (info: a hop accounted from the other side of a missing or
    damaged log), `value_beyond_history` (a value past the hops any history shows; left out).

    A failed try of a custody delivery that is sent again (a ring's successor that could not take
    the token yet) is logged once per try; the later `sent` record of the same message counts and
    is not a `duplicate_record`.

    A sent record with `attempts = 0` is a reply whose arrival its sender cannot observe: it is
    compared with the receiver's record when there is one, and never reported as undelivered.
    Every reply a node sends is logged at both ends: an `exchange.accept`, and an initiator's answer
    to its peer's status question (`exchange.committed`, with the value its commit carries,
    `exchange.aborted` or `exchange.pending`, under the exchange's MessageId); an answer without a
    value given twice (`exchange.pending`) is one message, not a `duplicate_record`. Signals without
    a value (`done`, `exchange.abort`) need no record at the receiver. A refusal (`rejected`) keeps at
    most the protocol's dimension of its payload and `payload_sha256`, the digest of all of it; in a
    sender-anonymous view it names no sender (`claimed_sender` −1) and its value is keyed like an
    anonymous receive.

    """

    node_problems: list[Finding] = Field(default=[], description="findings about one log")
    consistency: list[Finding] = Field(default=[], description="findings between logs")


class Assumptions(Open):
    r"""
    ## Learning runs (`muffliato-gd`, `rw-sgd`): what `exact` assumes

    A learning run takes every gradient at a model that carries earlier noise, and u's data, through
    messages the observer never sees, so the view is no linear-Gaussian function of fixed inputs and
    the fixed-gradient value is only the `linearized` column. The `exact` column is this theorem
    (`report.json`'s `assumptions.exact`; the page lists it under "Columns"):

    **Reachable-step composition.** Let c[u, v] be the number of u's gradient steps (muffliato-gd) or
    contributions (rw-sgd) with a time-respecting path in the realized schedule to some value v received
    (muffliato-gd: a nonzero weight of the realized mixing maps at every round the path crosses; rw-sgd:
    the steps before the last model v received; a coalition: any member's values). Then v's view is
    (√c·Δ/σ)-GDP: `exact_rdp` = c·αΔ²/(2σ²), `exact_eps` the exact Gaussian profile at μ = √c·Δ/σ.
    Proof: every model state in the causal past of v's values is, given the earlier ones, Gaussian with a
    mean that moves between adjacent datasets only at u's c steps, by at most ηΔ; adaptive composition
    (Mironov 2017, Prop. 1; Dong, Roth & Su 2022, Cor. 3.3), then post-processing. Conditions:

    * A1: per-example clipping, so that at any model u's step gradient moves by at most Δ between
      adjacent datasets; the regulariser depends on no data (λθ is added after clipping);
    * A2: fresh independent N(0, σ²) noise at every step;
    * A3: a schedule (graphs, drop-outs, the walk, batches, step sizes) independent of the data;
    * A4: the observer knows its own data and noise; a coalition sees the union of its members' views.

    It needs no convexity and is tight for a neighbour that hears u at every step (a quadratic loss with
    step 1/L reaches it); `exact ≤ ldp` holds by construction (c ≤ u's steps). No value the view is proven
    to reach is known, hence the null lower end. `netdp plan --target-*` calibrates muffliato-gd's σ to
    this column, as `netdp compare` and `netdp sweep` do through it.

    """


class CollusionBlock(Open):
    r"""
    With `--colluders IDS` (audit and plan; synchronous and randomized Muffliato only, other protocols refuse it)
    the report adds `collusion`: the coalition C accounted as one observer whose view is the union of its members'
    views (their stacked message rows; every member's input, and noise unless `observer_knows_own_noise` is false,
    is known). `threat_model`, the pairs file and `summary` stay single-observer. Keys: `colluders` (sorted ids);
    `losses`, one per source u ∉ C: `source`, `hop_distance` (to the nearest member), `paper_rdp`/`paper_eps`
    (Theorem 1's sum over the union of the coalition's messages, see `notes`), `exact_rdp`, `exact_eps` (the upper
    end), `exact_rdp_upper`, `exact_eps_upper`, `exact_rdp_lower`, `exact_eps_lower`, `model_attack_eps_lower` (null
    unless the model attack ran: it then attacks every u → C; plans have none), `ldp_rdp`, `ldp_eps`,
    `reconstructable`, `ill_conditioned`, `paper_undercounts`, `best_member` and `best_member_exact_eps_upper` (the
    member that learns most about u alone); `summary`: `sentence` (who colluded, for people), `sources`,
    `exact_method`, `worst_source`, `max_exact_eps_upper`, `mean_exact_rdp_upper` ((1/n) Σ_u, Eq. 7's
    normalisation), `max_best_member_exact_eps_upper`, `max_gain_over_best_member` (largest ε ratio joint / best
    member, null when no member learns anything), `reconstructable_sources`, `paper_undercounts`,
    `attacked_sources`; `notes`. A plan accounts the coalition at the plan's σ (after calibration, which targets
    single observers).

    """


class LearningBlock(Open):
    r"""
    `learning.schedule_comparison` sets the run against the other graph schedule (Muffliato Fig. 1b):
    `realized` is the audited run, `planned` the same nodes, steps, gossip rounds, noise and accounting
    options on the other schedule, planned ex ante — G(n, p) drawn every step with p = mean degree /
    (n − 1) and seed 0 (plain gossip) for a run on a fixed graph, or the first connected step graph
    kept fixed for a run on graphs drawn per step. Each side: `role`, `schedule` (`"fixed"` or
    `"erdos_renyi"`), `graph`, `mean_degree` (expected, for a drawn graph), `edge_probability` and
    `seed` (`null` on a fixed graph), `accelerated`, `eps`: `{mean, std, min, max, quantiles}` of
    the exact ε (the proven bound) at `delta` over the n(n − 1) ordered pairs, `quantiles` at the
    block's `quantile_levels` (0, 0.05, …, 1), and `linearized_eps`: the same of `linearized_eps_upper`
    (the fixed-gradient model Muffliato's figure draws, no bound on the run); the block's `eps` and
    `linearized_eps` strings say which is which.

    """


class PlanBlock(Open):
    r"""
    ## Plans (`plan`)

    A plan adds `plan`: for muffliato `{rounds, accelerated, t_stop}`, for muffliato-async the
    keys of "Plans of randomized schedules" below, for ring-sum `{cycles, noise_placement, paper}`, for
    ring-histogram `{cycles, categories, gamma, paper, exact_not_computed}`,
    for walk-sum `{walks, seed, steps, ex_ante, paper}` (see "Token walks"), for rw-sgd `{walks, seed, steps,
    expected_contributions, ex_ante}` (see "rw-sgd"); with a target,
    `calibration: {target_eps, rule, sigma: {exact, ldp, central}}` (the report is then at
    `sigma.exact`; muffliato-gd adds `column`, saying that σ is calibrated to the exact column, the
    proven bound, never to `linearized`, and its headline says so).

    ### Plans of randomized schedules

    For muffliato-async, `netdp plan` simulates `--schedules` schedules (default 20, `--seed`
    default 0) of the nodes' Poisson clocks with the published activation probabilities, accounts
    each like a realized run, and reports their mixture as seen by an observer who learns the
    schedule (an upper bound on one who does not): RDP (1/(α−1)) log E exp((α−1)·rdp) and the exact
    (ε, δ) from the schedule-averaged privacy profile. `plan` holds `schedules`, `seed`,
    `activation`, `ticks_per_node`, `duration_s`, `ex_ante` (that rule in words) and, with a target,
    `calibration`. `reconstructable` means reconstructable in every schedule.

    """


class TokenWalkBlock(Open):
    r"""
    ## Token walks (`ring-sum`, `walk-sum`)

    The realized run is the token's path: each hop's holder from both sides' custody records
    (`received`/`kept` by the taker, `forwarded`/`acknowledged` by the giver, and the messages
    themselves). A value is named by its prefix h (the sum token at hop h holds the contributions
    of hops 0..h − 1; the result all of them).

    * `exact` (realized path): the linear-Gaussian view of every value the observer received (the
      sum at its visits, the result token or message), conditioned on the path that ran: one input
      column per node, counted once per contribution, and one column per noise draw at its public
      std (ring single placement: σ at hops h ≡ 0 mod (n − 1); distributed: σ/√n, the first σ;
      walk: σ at every hop), owned by the node that drew it. The method is `float-interval (general)`.
      On the ring the path is public; on the walk it is the realized path, which the observer is not
      told, so the walk's `exact` is the loss *given the realized path* (`summary.paper_undercounts.exact_given`,
      and the undercount check is `paper bound (ex ante) vs exact given the realized path`).
    * `paper`: PAbD Thm 1 (ring-sum) or Thm 3 (walk-sum) as stated: one (ε', δ) network-DP guarantee
      for every pair, so the same `paper.eps` for every pair at the report's `delta` and
      `paper.rdp` null (the theorems state none). Perturb's per-visit (ε, δ) comes from the exact
      Gaussian privacy profile at σ and Δ; the report's δ is split between the theorem's terms
      (Thm 1: Kδ + δ'; Thm 3: (T/n)δ + δ' + δ̂) on a grid, to make ε' smallest. `token_walk.paper`
      (and a plan's `plan.paper`) holds `theorem`, `eps`, `split` (`perturb_eps`, `perturb_delta`,
      `delta_prime`, and for Thm 3 `delta_hat`, `N_v`, `gamma_n`) and `conditions`: each
      `{name, holds, detail}`, namely `epsilon, delta > 0 (stated)` (σ > 0), `view = the token's
      visits (Eq. 4 / Eq. 5)` (fails for the observers that also receive the result, which both
      theorems leave out), `no collusion`, and `single placement (Alg. 1)` (Thm 1) or `visits of
      each observer <= N_v` (Thm 3: realized visits in an audit; by construction ex ante). A failed
      condition is also a note.
    * `ldp`: per pair, the source's own (the `ldp_*` columns); `central`: the sum with everyone's noise,
      released once per mean number of visits.
    * `model_attack`: the distinguishing attack on the same model; where a view pins an input down
      (an infinite exact loss) the attack scores along the direction no noise reaches.

    A walk-sum plan simulates `--schedules` walks of Alg. 3 (default 20, `--seed` default 0): from
    node 0, every next holder uniform over all n nodes, itself included. Each walk is accounted like
    a realized one and the plan reports their mixture, the path revealed to the observer (an upper
    bound on the path kept secret; `exact_given` is `"the path"`): RDP (1/(α−1)) log E
    exp((α−1)·rdp), exact (ε, δ) from the averaged profile, each source's `ldp` the mixture of its
    own simulated visits. A ring-sum plan
    is the audit of the ring's one path; a target no σ can meet (a view that pins an input down)
    is refused.

    ## Ring histogram (`ring-histogram`, PAbD Alg. 2)

    The run is the ring's token as for ring-sum (`token_walk.tokens`, the same findings and checks);
    the report's `sigma` is γ. Per pair:

    * `paper`: PAbD Thm 2 **by its proof**: each window between two of the observer's values is a
      shuffle of n answers of RR_γ, ε₀ = ln(1 + L(1 − γ)/γ), so (12 ε₀ √(ln(1/δ_w)/n), δ_w)-DP by
      Erlingsson et al.'s Cor. 9 (n ≥ 100, 0 < ε₀ < 1/2, δ_w < 1/100), and the K windows compose by
      advanced composition at δ = K δ_w + δ', the split taken at the composed bound's minimum (searched
      on a logit grid, refined by Brent's method). `token_walk.paper` (a plan's `plan.paper`) holds
      `theorem`, `eps`, `split` (`local_eps` ε₀, `window_eps`, `window_delta`, `delta_prime`),
      `conditions` (`gamma > 0`, Cor. 9's three with their values, the view and collusion ones) and
      `stated`: `{eps, window_eps, why_not_used}`, the theorem's statement at the same split. The
      statement sets γ so that RR_γ is 12 ε √(ln(1/δ)/n)-LDP, i.e. the corollary with ε₀ and ε
      swapped, which understates each window's loss whenever 12 √(ln(1/δ_w)/n) > 1 (n below
      144 ln(1/δ_w)); `why_not_used` says so in a sentence, and the page and console print the two
      values side by side. `token_walk.rr_epsilon` is ε₀ at the run's γ.
    * `exact` (method `"enumeration"`): the count vectors the observer saw, window by window, with the
      other nodes' inputs at their worst case (every assignment enumerated); ε at δ from the privacy
      loss distribution, RDP from the same atoms (`exact_*_upper` equal `exact_*`).
    * `ldp`: the source's K answers seen directly; `central`: null.

    Before a pair is enumerated its size is estimated: for each assignment of the hiding nodes'
    inputs, the count vectors its windows' distributions are built through (L·C(e + L, L) for a window
    of e elements) plus their joint outcomes (the product of the windows' C(e + L − 1, L − 1)). The
    pairs file's `exact_enumeration_size` holds that estimate for every pair (for a pair whose windows
    alone are beyond the limit, the assignments are not counted: a lower bound, still beyond it). A
    pair above 100,000 (`histogram.ENUMERATION_LIMIT`, about a second of work) is refused up front,
    never left running: its `exact_*` are null ("not computed"), a note says how many and why, and
    `token_walk.exact_not_computed` (a plan's `plan.exact_not_computed`) is `{count, of, limit,
    smallest_size, pairs}`, `pairs` the 20 refused pairs of smallest estimate as `{source, observer,
    size}`; the page and console say it in a sentence. `count` is 0 when every pair was computed.

    """


class RwSgdBlock(Open):
    r"""
    ## rw-sgd (random-walk DP-SGD, ICML 2024 Alg. 1)

    The model is the token (`model`, T hops from node 0); a node's view is every model it received,
    conditioned on the walk that ran, rebuilt from the custody records (a sender-anonymous receive
    names no sender: its giver is the node whose forward of that hop names the receiver). Per pair:

    * `paper`: ICML 2024 Thm 3 as written, (α/σ_m²)(L[u,v] + H_T/n) per contribution, σ_m = σ/Δ,
      L = −log(I − W + 11ᵀ/n) with W the published transition matrix, times u's realized gradient
      steps (capped); a sender-known run takes max over w ∈ {v} ∪ N(v) of L[u,w] (App. B.1). The
      theorem holds only at the orders α with σ_m² ≥ 2α(α − 1), up to (1 + √(1 + 2σ_m²))/2
      (`rw_sgd.theorem3.largest_valid_order`): `rdp` is null where the report's α is outside them;
      `eps` is the tight conversion's minimum over those orders only (the conversion's grid below
      that order, a geometric grid up to it, and the order itself), whatever the report's α, and null
      ("not computed", with a note) when no order above 1.01 holds (σ_m² < 0.0202, σ = 0 included).
      With `conversion: "paper"`, `eps` is the classic conversion at the report's α, null where it is
      outside the theorem.
    * `exact`: given the realized path (the observer is not told it): the proven bound of "Learning
      runs", c = u's gradient steps before the last model v received (the walk carries each to every
      later model). A plan's `exact` is the mixture over its simulated walks, each walk's path told to
      the observer.
    * `linearized`: given the realized path: the linear-Gaussian view of the models v received, each of
      u's gradient steps its own column moved by at most Δ in its own direction of R^D, the worst case
      over those directions (without a regulariser the walk's segments between v's observations carry
      independent noise, so steps in one direction reach it and the two ends meet; with one, hop j
      weighs (1 − γλ) less at every later gradient step), the other gradients held fixed: exact for that
      model, no bound on the run. A plan's is the mixture over its simulated walks.
    * `realized_path`: given the realized path too: amplification by iteration along it: u's steps
      before the same observation of v bounded jointly (Feldman et al.'s Thm 1, optimal schedule),
      observations composed; needs non-expansive steps, not fixed gradients. Its ε uses the run's
      conversion.
    * `ex_ante`: the path kept secret: `realized_path` over simulated walks of W from node 0 (seed 0),
      (1/(α−1)) log E exp((α−1)·rdp), at the report's α only; ε by the tight conversion at that
      order. A Monte-Carlo estimate, so `rdp_upper` / `eps_upper` give the upper end of each pair's
      95% interval (two-sided, per pair: the normal interval of the mean of exp((α−1)·rdp), mapped
      through the log): lead with them. The walks keep coming in batches until the median pair's
      relative half-width (upper − estimate)/estimate is at most 2% (at least 1000, at most 20000
      walks); a plan with `--schedules K` takes exactly K.
    * `ldp`: each of u's gradient steps seen directly.

    `rw_sgd` holds `theorem3` (the per-contribution matrix's mean and max, null outside the
    theorem's orders; whether the report's order is valid; `noise_multiplier`; `largest_valid_order`),
    `ex_ante` (`walks`, `seed`, `confidence`, `walks_rule`, `interval`, and `relative_half_width`:
    `{median, max}` over the pairs with a positive estimate), `contributions` per node,
    `contribution_cap` and `sender`; the `communicability` of the graph (Estrada–Hatano, expm(A))
    that the heatmap figure shows beside the pair losses is a column of the pairs file (plans have
    it too). An rw-sgd plan's `plan` holds `walks` (the mixture's, `--schedules`, default 200),
    `seed`, `steps`, `expected_contributions` and `ex_ante` (as in `rw_sgd.ex_ante`); its `ex_ante`
    column is the audit's (the same walks from the same seed) unless `--schedules` is given.

    """


class PersonalizedBlock(Open):
    r"""
    ## personalized-cd (personalized and private P2P learning, AISTATS 2018)

    Each agent's public log holds a `budget` record per release (the ε it spent, δ = 0, mechanism
    `laplace`; its step is the release index), written before the release's broadcast (kind `model`,
    sequence = release index + 1) leaves the node. With a published warm start, release 0 is the
    agent's noisy local model and update t is release t + 1; without, update t is release t. An
    update's record is written together with its `step_inputs` (step = the agent's wake-up, the
    neighbour broadcasts it used, by peer and sequence). With `warm_start_propagation` P, the agent's
    first P wake-ups after its warm start are steps of model propagation (16): each logs its
    `step_inputs` (steps 0..P − 1) and broadcasts sequence k + 2 but logs no spend and no draw (it
    reads released models only, so it is post-processing and no release here); update t is then
    wake-up P + t, budget step t + 1, broadcast sequence P + t + 2.

    * `run`: `private`, `updates_planned` (T_i), `updates` (per agent, its releases counted from the
      logs but a warm start), `inferred_spends` (agents without a usable log, whose releases their
      neighbours logged and which are counted at their published ε).
    * `replay.nodes[i]`: `updates`, `epsilon_sum` (`"inf"` in non-private CD), `spend_inferred`.
    * Pair columns are per source, the same for every observer (all anyone sees of u is a
      post-processing of u's broadcasts): `paper` is Thm 1 of u's ε_t at the report's δ (no RDP);
      `exact` and `ldp` the PLD accountant's ε of u's Laplace releases at δ and their exact Laplace
      RDP at α; `central` is null. `exact` is an upper bound, the composition of all of u's releases
      for every observer (`column_definitions.exact` says so): exact for an observer that sees every
      release, above the loss of one that sees fewer (a non-neighbour). `sigma` is the noise
      relative to the logged Laplace scales (1 as run, 0 for non-private CD), `exact_method` is
      `"pld"`.
    * `personalized`: `private`, `mu`, `lipschitz` (L₀), `updates_planned`, and `agents` (per agent:
      `node`, `updates`, `spend_inferred`, `heard_by` (nodes that logged one of its broadcasts); in a
      private run also `budget` `{epsilon, delta}`, `planned_epsilons` (the published ε of each release:
      the warm start's, then every update's share by the published split),
      `epsilon_sum`, `theorem1` and `pld` (its spends composed at its own δ̄_i) and `within_budget`).
    * `utility` (with `--data`): `metric` (`"accuracy"`, or `"rmse"` for least squares: each agent's test
      RMSE), `agents_scored` (agents with an output), `test_examples`,
      the mean test metric over those agents of `run` (the logged outputs), `private` (the same, or
      null for non-private CD), `local` (each agent's minimiser of L_i) and `non_private` (CD simulated
      without noise, the same updates), `budget_curve` (`epsilon`, `private`: simulated private CD's
      accuracy at each budget, mean of `repeats` runs, `delta`, `updates`, `run_epsilon`), and
      `baselines`; drawn as `accuracy_vs_budget.png`.
    * Check `no agent spent beyond its budget` (private runs): every agent's logged spends compose by
      Thm 1 within its (ε̄_i, δ̄_i), and no release lacks its budget record (`release_without_budget`)
      or has one out of order (`budget_out_of_order`), both also findings.
    * Check `transcript reproduces the logged payloads` (with `--with-private-logs` and `--data`): for
      every agent's every logged update t, update (6) of its logged gradient and draw of step t, the
      last broadcast of its own logged before it (zeros before any; a release whose broadcast a crash cut
      short changes nothing, as a resumed agent goes on from its last logged broadcast; its private input,
      if any, is told by the count of inputs: a log the count cannot place is `unexplained_payload`) and
      the neighbour broadcasts its `step_inputs`
      names as its view received them (zeros for a neighbour it names none of) is every `sent` model
      of sequence t + 1; the logged gradient is the clipped gradient recomputed from the agent's data
      at that model; and each draw's Laplace scale s_t meets s_t ε_t ≥ 2L₀/m_i for the step's logged
      ε_t. With a published warm start, update t is release t + 1 (budget step t + 1, sequence t + 2)
      and starts at t = 0 from the warm start, or from its last propagation step (each recomputed by
      (16) from its warm start as broadcast and the neighbour broadcasts its `step_inputs` names);
      the warm start is release 0: its logged local model is recomputed from the data, its
      `warm_start` draw's scale meets s ε_ws ≥ √p (1 + 10⁻⁶) L₀/(m_i λ_i) for the logged ε_ws, and
      its broadcast (sequence 1) is their sum. m_i (in c_i, λ_i and α_i) comes from the data
      folder: without `--data` the check fails,
      `missing_data`. Findings: `payload_not_reproduced`, `unexplained_payload` (a broadcast without
      its update, an update without its private inputs, or one naming a broadcast its view never
      received), `noise_below_spend`, `missing_private_input`.
    * `empirical` and the `canaries` block (a run made with `netdp run --canaries M`): every vector is
      the p data coordinates, then M canary coordinates; each update's contribution carries the agent's
      signs at L₀/m_i (half its l1 sensitivity; the warm start carries none), so each broadcast's canary
      block is update (6) unrolled over the `step_inputs` records: one row per broadcast some agent
      logged, named (sender, sequence), one Laplace column per (agent, release) of std √2·(2L₀/m_i)/ε_t
      at its logged ε_t (the warm start's: its own sensitivity over ε_ws), m_i read from the agent's
      canary record (its magnitude, L₀/m_i). The check `noise in the run's messages is the published
      noise (canaries)` bounds both tails of each message's mean square for Laplace noise (the lower by
      the bound for means of non-negative variables with the Laplace fourth moment, the upper by
      Cantelli's inequality) where Gaussian runs use the χ² law. Non-private CD plants canaries too: no
      noise column, the check not computed.
    """


class ReportCore(Closed):
    r"""
    `netdp audit RUNDIR --out DIR` writes, into DIR (it refuses a DIR that already holds a
    `report.json` unless `--force` is given):

    * `report.json`: the document below: summaries, checks and the run; no per-pair array
    * `pairs.parquet`: one row per ordered pair (u → v), u ≠ v: every column of "The pairs file" below
    * `pairs.csv`: the same rows as CSV, an export: written with `--csv`, or without asking when n ≤ 256 (65,280
      pairs)
    * `loss_vs_hops.png`, `pair_heatmap.png`, `node_means.png`, `loss_by_observer.png`: figures drawn from
      `report.json` and `pairs.parquet`; `loss_by_observer.png` is each observer's mean exact ε (upper end) over the
      sources at each hop distance, one line per observer (at most 64, evenly spaced) and their mean, which carries
      information where every node looks alike (a hypercube, a ring) and the per-observer means of `node_means.png`
      are all equal
    * `utility.png`, `schedule_spread.png`: learning runs: the `utility` block over steps (when audited with
      `--data`) and `learning.schedule_comparison`
    * `index.html`: one static page bundling summary, checks (pass, FAIL, or ⚠ warning in amber), threat model,
      figures and links; its summary gives every mean with its rule, ε beside RDP, and one sentence each on
      reconstructed pairs, the combinations each observer received (`combinations`), the empirical column (the run's
      canaries, `canaries`) and the model attack's limit (`summary.model_attack_limit`), the utility, a "Columns"
      section (`column_definitions`: each column in one line, with what it is conditioned on) and a "Faults" section
      (`faults`)

    `netdp plan` writes the same document (as `plan.json`, its pairs beside it as `plan-pairs.parquet` and, with
    `--csv` or when n ≤ 256, `plan-pairs.csv`: `<stem of --out>-pairs`) for the planned schedule, without logs: then
    `summary.sampler` is `null` and there is no `replay` key. Every protocol the auditor knows (`muffliato`,
    `muffliato-async`, `muffliato-gd`, `ring-sum`, `walk-sum`) writes this schema; the keys that depend on the
    protocol are marked below. With σ = 0 both commands print `σ = 0: no privacy` once and still write the report
    (its losses are then `"inf"` or 0).

    ## Conventions

    * Units are in the names: `rdp` is a Rényi divergence (nats) at order `alpha`; `eps` is an ε
      (nats) at `delta`. Indexing is always *source* u (whose data) → *observer* v (whose view).
    * Numbers are JSON numbers, except: `null` means "no value" (not defined for this pair, e.g. a
      closed form outside its validity range) and the string `"inf"` means an infinite loss
      (no noise). The pairs file stores "no value" as null and an infinite loss as IEEE `inf`; the CSV
      leaves "no value" empty, writes `inf`, and flags as `true`/`false`.
    * Top-level keys are fixed; callers may add more (`extra`, below) but never overwrite these.

    ## Top level

    """

    model_config = ConfigDict(extra="allow")

    schema_: str = Field(alias="schema", description=(
        "`\"netdp.audit.report/5\"` (in `/4`, `exact.rdp`/`exact.eps`, the pairs file's `exact_rdp`/`exact_eps`"
        " and the summary's `exact` means were the lower end of the exact interval; from `/5` they are its "
        "upper end, and the lower end is named `*_lower`; in `/4`, `empirical` was an attack on the audit's "
        "own model, which `/5` calls `model_attack`, and `empirical` is the real run's canaries)"
    ))
    protocol: str = Field(description=(
        "the run's protocol: `\"muffliato\"`, `\"muffliato-async\"`, `\"muffliato-gd\"`, `\"ring-sum\"` or "
        '`"walk-sum"`'
    ))
    run: RunSection = Field(description="the schedule that was accounted, see below")
    alpha: float = Field(description="Rényi order of every `rdp` value")
    delta: float = Field(description="δ of every `eps` value")
    sigma: float = Field(description="std of each node's Gaussian noise (0: no privacy)")
    sensitivity: float = Field(description=(
        "ℓ2 sensitivity Δ used (the largest any node's sampler asked for, grid effects included)"
    ))
    threat_model: dict[str, Any] = Field(description=(
        "`ThreatModel.describe()`: `name` (`curious-observer`, `coalition` or `eavesdropper`: `netdp audit "
        "--threat-model`, `--colluders`), notion, `observer_knows_own_value`, `observer_knows_own_noise`, "
        "`observer_knows_shared_draws` (the pairwise secrets on its own edges), `graph_public`, "
        "`colluding_observers`"
    ))
    pairs: list[dict[str, Any]] = Field(description=(
        "the pairs as objects: every pair when n ≤ 256, else the 20 of largest `exact.eps_upper`, largest "
        "first. A pair is `{source, observer, hop_distance, paper_undercounts, paper: {rdp, eps}, exact: "
        "{rdp, eps, rdp_upper, eps_upper, rdp_lower, eps_lower, reconstructable, ill_conditioned}, ldp: {rdp,"
        " eps}, ...}` (learning runs add `linearized: {rdp, eps, rdp_upper, eps_upper}`) (`exact.rdp` = "
        "`exact.rdp_upper`, see `exact_*` below): every column `<name>_<unit>` of the pairs file as `<name>: "
        "{<unit>: ...}`, a column of no unit as a key of its own (facts such as `communicability`); a "
        "sub-object with no value at all (the `empirical: {eps_lower}` of a pair no canary audited, the "
        "`model_attack: {eps_lower}` of an unattacked one) is left out"
    ))
    pairs_listed: PairsListed = Field(description=(
        '`{count, of, which}`: how many pairs `pairs` lists, of how many, and which (`"all"`, or the largest '
        "first)"
    ))
    pairs_file: PairsFile = Field(description=(
        'where every pair is: `{file, format: "parquet", rows, row_group_rows, columns, csv}`, see "The pairs'
        ' file"'
    ))
    baselines: Baselines = Field(description=(
        "`ldp` and `central`, each `{rdp, eps}`, at the same noise (token walks: `ldp` is the worst source's,"
        " see the `ldp_*` columns)"
    ))
    summary: Summary = Field(description="see below")
    checks: list[CheckResult] = Field(description=(
        '`{name, ok, level, detail}`; `level` is `"pass"`, `"fail"` or `"warning"` (a warning holds, `ok: '
        'true`, but says something is not what it seems, e.g. the paper bound undercounts); see "Checks"'
    ))
    notes: list[str] = Field(description="the accountants' remarks")
    column_definitions: dict[str, str] = Field(description=(
        "column name (`paper`, `exact`, `ldp`, a protocol's own) → one line saying what the column is and "
        "what it is conditioned on, where the protocol gives one (token walks, muffliato-gd, rw-sgd, "
        "personalized-cd; `{}` otherwise); the page shows them. Learning runs: `exact` states the theorem and"
        " its conditions, and `linearized` starts with the sentence \"`linearized` holds every other node's "
        "gradient fixed, which a learning run does not; it is neither an upper nor a lower bound on what v "
        'learns: read `exact`, a proven bound."'
    ))
    assumptions: Assumptions | None = Field(default=None, description=(
        "learning runs only (muffliato-gd, rw-sgd; absent otherwise): what their columns rest on, `{exact: "
        "{theorem, conditions}, linearized: {definition}}`. `exact.theorem` is the reachable-step composition"
        ' (see "Learning runs" below), `exact.conditions` its four conditions A1–A4 as strings; '
        '`linearized.definition` what the linearized column computes. The page lists them under "Columns"'
    ))


class AuditReport(ReportCore):
    """An audit adds (through `extra`; a plan adds `plan` and `collusion`, and a protocol's block comes only from that
    protocol):"""

    options: dict[str, Any] | None = Field(default=None, description=(
        "the `AuditOptions` used (`alpha` (null = topology's), `delta`, `observer_knows_own_noise`, "
        "`conversion` (see `summary.paper_conversion`), `attack_pairs`, `attack_runs` (the model attack's: "
        "null is its default, 20000 replays or 1000 simulated canaries), `attack_seed` (the model attack's, "
        "and the canary audit's pilot), `with_private_logs`, `colluders` (empty: none), `eavesdropper` "
        "(`--threat-model eavesdropper`)) and `sensitivity_published`"
    ))
    canaries: dict[str, Any] | None = Field(default=None, description=(
        "`null` unless the run planted canaries (`netdp run --canaries M`, the topology's `canaries`); else "
        "the one-run canary audit behind the `empirical` column: `canaries` (M per node), `pairs` (how many "
        "pairs it bounded; 0 with a `reason` when the protocol's canaries are not audited), `confidence` "
        "(every bound holding together: 0.95), `limit_eps` (the largest ε M canaries can certify for that "
        'many pairs: every guess right; a bound at the limit means "at least"), `reason` (null, or why '
        "nothing was computed), `values_outside_the_model` (`{sender, receiver, kind}` of every value in a "
        "view that no row of the model accounts for: they are added to the observer's canary scores and fail "
        "the check `every value that reached a node is in the audited model`), `notes`"
    ))
    replay: ReplayBlock | None = Field(default=None, description=(
        '`rundir`; `protocol`; `nodes`: per node `{node, log: "intact"|"damaged"|"unusable", ..., '
        "rejected_messages, sampler_kind}` with the protocol's facts in between (see below); `node_problems` "
        'and `consistency`: findings `{severity: "error"|"warning"|"info", kind, node, detail}` (see '
        '"Findings"); `private_logs_read`'
    ))
    payloads: dict[str, Any] | None = Field(default=None, description=(
        "`{stripped, reason, not_computed}`. `stripped: true` when RUNDIR holds structure-only copies of the "
        "view logs (`netdp collect --structure-only`: every record kept, its payloads reduced to their shape "
        "and byte count, the header's `payloads_stripped` set); the exact, paper, LDP and central columns are"
        " then computed as from the full logs and equal theirs. `reason` says why parts are missing (`null` "
        "for full logs); `not_computed` lists each part that needs payloads as `{kind: "
        '"column"|"check"|"block", name, reason}`: the `empirical` column (no pair is attacked; '
        "`--attack-pairs` other than `auto` or `none` is refused), the check `transcript reproduces the "
        "logged payloads` (`--with-private-logs` is refused), a protocol's own payload checks "
        "(muffliato-async: `committed exchanges conserve the sum of values`) and the `utility` block "
        "(`--data` is refused; averaging runs keep the block with `mse: null`). Empty for full logs. A folder"
        " that mixes structure-only and full view logs is refused"
    ))
    planned_vs_run: dict[str, Any] | None = Field(default=None, description=(
        "muffliato only: `{same_schedule: true}`, or `{same_schedule: false, mean_exact_rdp_per_observer: "
        "{planned: [...], run: [...]}}` when drop-outs, early stops or late values changed the schedule"
    ))
    learning: LearningBlock | None = Field(default=None, description=(
        "muffliato-gd only: `task`, `steps`, `gossip_rounds`, `adjacency`, `clip`, `batch` as published, and "
        "`schedule_comparison` (below; `null` without noise, or when no step graph of a per-step schedule is "
        "connected)"
    ))
    faults: dict[str, Any] | None = Field(default=None, description=(
        "`null` when every node logged its final output and no drop-out was logged; else `stopped`: per node "
        "without a final output `{node, log: \"intact\"|\"damaged\"|\"unusable\", rounds_completed (its protocol's,"
        " `null` where it has no rounds), last_record_s (when its last readable record was written, in "
        "seconds from the earliest first record of any log; `null` for an unusable log)}`, and `drop_outs`: "
        'per logging node and neighbour `{node, peer, count, rounds}` (`rounds` as ranges, e.g. `"2-4, 6"`), '
        "from the `drop_out` records the replay accepted"
    ))
    combinations: dict[str, Any] | None = Field(default=None, description=(
        "averaging protocols (muffliato, muffliato-async): `received_per_observer` (values in each observer's"
        " view, received or refused with their payload; `null` without a usable log), `planned_per_observer` "
        "(synchronous: T·deg of each node; else `null`), `unknown_inputs` (n − 1), `reconstructed_pairs` (the"
        " pairs the exact accountant found reconstructable), `pairs` and `sentence` (all of it for people, "
        "with the rule: n − 1 independent combinations reveal every noisy input, amplification lives where "
        "T·deg is well below n)"
    ))
    utility: dict[str, Any] | None = Field(default=None, description=(
        'averaging protocols, always: `metric: "mse"`, `per: "coordinate"`, `mse` ((1/|S|) Σ_{v ∈ S} ‖x_v^T −'
        " x̄‖²/D over the nodes S with a final output, against the mean x̄ of the clipped inputs; `null` when"
        " the truth is unknown), `truth` (`\"data\"`: `--data`, the nodes' input files clipped as the nodes "
        'clip them; `"private logs"`: `--with-private-logs`; `null`), `reason` (why `mse` is `null`, e.g. '
        "structure-only logs, which hold no output; else `null`), `nodes_scored`, `bound` (Muffliato Thm 2, "
        "3σ²/n, once T ≥ T_stop; muffliato-async: Thm 3, 4σ²/n; `null` for a plug-in protocol audited by "
        "`LinearRoundAuditor`, which has the block with `--data` only), `bound_rule` (`null` with it), "
        "`rounds` (T, synchronous), `t_stop` (Thm 2's T_stop for this run's inputs, synchronous with a truth,"
        " else `null`), `central` (σ²/n: the mean released with everyone's noise, expected) and `local` (σ² +"
        " the inputs' spread per coordinate: every node keeps its own noisy input, expected; `null` without a"
        ' truth). Learning runs audited with `--data` only: `metric` (`"accuracy"` or `"mse"`), '
        "`test_examples`, `steps` (1..T), the metric after each step for `netdp` (mean over nodes), `central`"
        " (a trusted aggregator adding the noise of the mean, σ/√n) and `local` (every node alone, noise σ), "
        "`initial` (the starting model θ = 0) and `baselines` (how the two baselines were simulated). decor (and "
        "secure-neighbourhood, its masks as the pairwise draws) with a node that stopped early adds "
        "`drop_outs`: `stopped` (`{node, rounds_completed}`), `survivors` (nodes with"
        " an output), `uncancelled_rounds` (ranges: rounds with a pairwise draw whose coefficient in the "
        "survivors' summed outputs is not zero), `uncancelled_draws` (how many), `uncancelled_mse` (‖m‖²/D, m the "
        "survivors' mean moved by those draws, from the private logs), `share` (its ratio to `mse`) and `reason` "
        "(why the last two are `null`: no private logs); the truth stays the mean of all n clipped inputs"
    ))
    decor: dict[str, Any] | None = Field(default=None, description=(
        "decor only: `paper`, DECOR's Theorem 1 (SecLDP) on this run: `theorem` (the formula, in words), "
        "`covers` (every condition holds: only then is it the `paper` column; else that column is empty and a "
        "note says why), `reason` (the failed conditions, or `null`), `conditions` (`{name, holds, detail}`: "
        "`Decor's D-SGD` (an averaging run is not), `both noises every step` (not with `noisy_rounds`), `every "
        "node completes every step` (no drop-out), `no collusion`), `rdp_per_observer` (the theorem's value, "
        "covered or not: RDP at `alpha`, the same for every source of an observer; an eavesdropper's is the same"
        " for every observer), `alpha` and `units`; with a drop-out, `planned_vs_run`: `{mean_exact_rdp_per_observer: "
        "{planned: [...], run: [...]}}`, each observer's mean exact loss in the run in which every node completes "
        "every round and in the run that happened"
    ))
    secure_neighbourhood: dict[str, Any] | None = Field(default=None, description=(
        "secure-neighbourhood with a node that stopped early only: `planned_vs_run`: "
        "`{mean_exact_rdp_per_observer: {planned: [...], run: [...]}}`, each observer's mean exact loss in the run "
        "in which every node completes every round and in the run that happened"
    ))
    token_walk: TokenWalkBlock | None = Field(default=None, description=(
        "ring-sum, walk-sum and ring-histogram only: `tokens` (per token: `token_id`, `planned_hops`, "
        "`hops_taken`, `holders` by hop (hop 0: the originator; `null`: no log tells), `inferred_hops`) and "
        '`paper` (below); ring-histogram adds `rr_epsilon` and `exact_not_computed` (see "Ring histogram")'
    ))
    exchanges: dict[str, Any] | None = Field(default=None, description=(
        "muffliato-async only: `{committed: count, declined: count, aborted: [exchange ids], half_applied: "
        "[exchange ids]}`. An exchange id is `\"<initiator>-<initiator's sequence>\"`; a half-applied exchange "
        "was committed by one side only (its initiator died between its commit and the delivery of its "
        "decision, or its commit arrived after the responder gave up): only that side's value changed, and it"
        " is accounted that way"
    ))
    rw_sgd: RwSgdBlock | None = Field(default=None, description="rw-sgd only: see \"rw-sgd\" below")
    personalized: PersonalizedBlock | None = Field(default=None,
                                                   description="personalized-cd only: see \"personalized-cd\" below")
    collusion: CollusionBlock | None = Field(default=None, description="`--colluders` only (audit and plan): the "
                                             "coalition accounted as one observer, see below")
    plan: PlanBlock | None = Field(default=None, description="plans only (`netdp plan`): what was planned, see "
                                   "\"Plans\" below")


def dump_report(report: ReportCore) -> dict[str, Any]:
    """The document as JSON values, with exactly the keys that were given (an absent block stays absent)."""
    return report.model_dump(mode="json", by_alias=True, exclude_unset=True)


def load_report(path: Path) -> AuditReport:
    """A report.json (or a plan's file) read back and checked against the schema, for readers that use attributes."""
    return AuditReport.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
