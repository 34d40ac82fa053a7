"""`netdp data split` and the learning-set loader: exact partitions, preprocessing, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coordinator_tools.cli import main
from coordinator_tools.dataprep import learning_data as ld
from node.data import load_learning_data
from node.errors import ConfigError

N_NODES = 8


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def make_topology(path: Path, capsys: pytest.CaptureFixture[str], dimension: int = 30, *extra: str) -> Path:
    argv = ("topology", "generate", "hypercube", "--n", str(N_NODES), "--protocol", "muffliato-gd", "--steps", "3",
            "--gossip-rounds", "1", "--batch", "1", "--dimension", str(dimension), *extra, "--out", str(path))
    assert run(capsys, *argv)[0] == 0
    return path


@pytest.fixture
def topology(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    return make_topology(tmp_path / "topo.json", capsys)


def split(capsys: pytest.CaptureFixture[str], dataset: str, topology: Path, out: Path, *extra: str) -> str:
    code, stdout, stderr = run(capsys, "data", "split", dataset, "--topology", str(topology), "--out", str(out),
                               *extra)
    assert code == 0, stderr
    return stdout


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("netdp: error: "), err
    for fragment in fragments:
        assert fragment in err, err


Shares = list[tuple[np.ndarray, np.ndarray]]


def read_split(folder: Path) -> tuple[ld.DatasetInfo, Shares, tuple[np.ndarray, np.ndarray]]:
    info, x_test, y_test = ld.load_test_set(folder)
    loss = ld.LOSS_OF_TASK[info.task]
    shares = [load_learning_data(folder / f"node-{v}.npz", info.dimension, task=loss) for v in range(info.n_nodes)]
    return info, shares, (x_test, y_test)


def positive_share_spread(shares: Shares) -> float:
    """Mean over nodes of |node's fraction of +1 − overall fraction of +1|."""
    overall = np.mean(np.concatenate([y for _, y in shares]) > 0)
    return float(np.mean([abs(np.mean(y > 0) - overall) for _, y in shares]))


def test_breast_cancer_split_is_80_20_with_each_example_in_one_place(
    topology: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "data"
    stdout = split(capsys, "breast_cancer", topology, out, "--seed", "7")
    assert "seed 7" in stdout and "benign -> +1" in stdout
    info, shares, (x_test, y_test) = read_split(out)
    assert (info.dataset, info.task, info.dimension, info.n_nodes, info.partition, info.skew, info.seed) == \
        ("breast_cancer", "classification", 30, N_NODES, "iid", None, 7)
    assert info.test_size == len(y_test) == round(0.2 * 569)
    assert [len(y) for _, y in shares] == [info.train_sizes[v] for v in range(N_NODES)]
    assert sum(info.train_sizes.values()) == 569 - info.test_size
    assert max(info.train_sizes.values()) - min(info.train_sizes.values()) <= 1
    rows = np.concatenate([x for x, _ in shares] + [x_test])
    assert len(np.unique(rows.round(12), axis=0)) == 569  # breast cancer's rows are distinct
    for x, y in [*shares, (x_test, y_test)]:
        np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0)
        assert set(np.unique(y)) <= {-1.0, 1.0}
    assert json.loads((out / "dataset.json").read_text())["features"] == "standardised, unit-norm rows"


def test_partitions_cover_every_training_example_exactly_once() -> None:
    groups = np.repeat([0, 1, 2], [200, 150, 50])
    for shares in (ld.iid_shares(400, 7, np.random.default_rng(2)),
                   *(ld.label_skew_shares(groups, 7, skew, np.random.default_rng(2)) for skew in (0.01, 0.5, 100.0))):
        np.testing.assert_array_equal(np.sort(np.concatenate(shares)), np.arange(400))
        sizes = [len(share) for share in shares]
        assert max(sizes) - min(sizes) <= 1


def test_train_test_split_is_80_20() -> None:
    train, test = ld.train_test_indices(503, np.random.default_rng(0))
    assert (len(train), len(test)) == (402, 101)
    np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(503))


def test_standardisation_uses_training_statistics_only() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(5.0, 3.0, size=(200, 4)), rng.normal(10.0, 2.0, size=200)
    train, test = np.arange(160), np.arange(160, 200)
    prepared_train, prepared_test = ld.prepare(ld.Dataset(x, y, "regression"), train, test)
    wild = x.copy()
    wild[test] = 1e6  # test rows never move the statistics
    unchanged = ld.prepare(ld.Dataset(wild, y, "regression"), train, test)[0]
    np.testing.assert_array_equal(unchanged.x, prepared_train.x)
    expected = (x[test] - x[train].mean(axis=0)) / x[train].std(axis=0)
    np.testing.assert_allclose(prepared_test.x, expected / np.linalg.norm(expected, axis=1, keepdims=True))
    for rows in (prepared_train.x, prepared_test.x):
        np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0)
    assert abs(prepared_train.y.mean()) < 1e-12 and abs(prepared_train.y.std() - 1.0) < 1e-12
    np.testing.assert_allclose(prepared_test.y, (y[test] - y[train].mean()) / y[train].std())


def test_a_constant_feature_becomes_zero_not_nan() -> None:
    x = np.column_stack([np.arange(10.0), np.full(10, 3.0)])
    train, _ = ld.prepare(ld.Dataset(x, np.ones(10), "classification"), np.arange(8), np.arange(8, 10))
    assert np.isfinite(train.x).all() and not train.x[:, 1].any()


def test_label_skew_skews_and_keeps_the_test_set(topology: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    common = ("--seed", "11", "--size", "2000")
    split(capsys, "separable", topology, tmp_path / "iid", *common)
    split(capsys, "separable", topology, tmp_path / "skew", *common, "--partition", "label-skew", "--skew", "0.1")
    iid_info, iid, iid_test = read_split(tmp_path / "iid")
    skew_info, skewed, skew_test = read_split(tmp_path / "skew")
    assert (skew_info.partition, skew_info.skew) == ("label-skew", 0.1)
    assert skew_info.train_sizes == iid_info.train_sizes
    assert positive_share_spread(skewed) > 0.25 > 0.05 > positive_share_spread(iid)
    for a, b in zip(iid_test, skew_test):  # one seed, one test set, whatever the partition
        np.testing.assert_array_equal(a, b)


def test_label_skew_of_a_regression_skews_the_targets() -> None:
    y = np.random.default_rng(4).normal(size=4000)
    groups = ld.skew_groups(y, "regression")
    assert np.bincount(groups).tolist() == [400] * 10
    skewed = ld.label_skew_shares(groups, 10, 0.05, np.random.default_rng(5))
    iid = ld.iid_shares(4000, 10, np.random.default_rng(5))
    assert np.std([y[share].mean() for share in skewed]) > 5 * np.std([y[share].mean() for share in iid])


def test_a_seed_makes_the_same_files_and_another_seed_others(
    topology: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    splits = []
    for name, seed in (("a", "9"), ("b", "9"), ("c", "10")):
        split(capsys, "separable", topology, tmp_path / name, "--seed", seed, "--partition", "label-skew",
              "--skew", "0.3", "--size", "300", "--label-noise", "0.05")
        splits.append(read_split(tmp_path / name))
    (_, a_shares, a_test), (_, b_shares, b_test), (_, c_shares, _) = splits
    for (xa, ya), (xb, yb) in zip([*a_shares, a_test], [*b_shares, b_test]):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    assert not np.array_equal(a_shares[0][0], c_shares[0][0])


def test_an_unseeded_split_prints_the_seed_it_drew(topology: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    stdout = split(capsys, "separable", topology, tmp_path / "d", "--size", "100")
    assert f"--seed {ld.load_dataset_info(tmp_path / 'd').seed}" in stdout


def test_digits_is_a_binary_task_on_64_features(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stdout = split(capsys, "digits", make_topology(tmp_path / "t.json", capsys, 64), tmp_path / "o", "--seed", "1")
    assert "digits 5-9 -> +1" in stdout
    info, shares, (_, y_test) = read_split(tmp_path / "o")
    labels = np.concatenate([y for _, y in shares] + [y_test])
    assert (info.task, info.dimension, len(labels)) == ("classification", 64, 1797)
    assert 0.4 < np.mean(labels > 0) < 0.6


def test_csv_round_trip_with_a_header_and_text_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(6)
    x = rng.normal(size=(120, 3))
    labels = np.where(x[:, 0] > 0, "P", "N")
    path = tmp_path / "houses.csv"
    lines = ["a,label,b,c"] + [f"{r[0]:.17g},{label},{r[1]:.17g},{r[2]:.17g}" for label, r in zip(labels, x)]
    path.write_text("\n".join(lines) + "\n\n")
    raw = ld.read_csv(path, "label")
    np.testing.assert_array_equal(raw.x, x)
    np.testing.assert_array_equal(raw.y, np.where(labels == "P", 1.0, -1.0))
    assert (raw.task, raw.labels) == ("classification", "label 'N' -> -1, 'P' -> +1")
    out = tmp_path / "out"
    split(capsys, f"csv:{path}", make_topology(tmp_path / "t3.json", capsys, 3), out, "--target", "label",
          "--seed", "1")
    info, shares, (_, y_test) = read_split(out)
    assert (info.dataset, info.task, info.dimension, info.test_size) == (f"csv:{path}", "classification", 3, 24)
    written = np.concatenate([y for _, y in shares] + [y_test])
    assert sorted(written.tolist()) == sorted(raw.y.tolist())


def test_a_headerless_numeric_csv_is_a_regression_on_its_last_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "reg.csv"
    np.savetxt(path, np.random.default_rng(7).normal(size=(80, 3)), delimiter=",")
    logistic = make_topology(tmp_path / "t2.json", capsys, 2)
    code, _, err = run(capsys, "data", "split", f"csv:{path}", "--topology", str(logistic), "--out",
                       str(tmp_path / "o"))
    assert_one_line_error(code, err, "regression", "--task least_squares")
    squares = make_topology(tmp_path / "t2s.json", capsys, 2, "--task", "least_squares")
    split(capsys, f"csv:{path}", squares, tmp_path / "o", "--seed", "2")
    info = ld.load_dataset_info(tmp_path / "o")
    assert (info.task, info.loss, info.dimension) == ("regression", "least_squares", 2)
    with pytest.raises(ConfigError, match="exactly two"):
        ld.read_csv(path, "0", "classification")


@pytest.mark.parametrize("argv, fragments", [
    (("csv:{tmp}/missing.csv",), ("missing.csv", "not found")),
    (("mnist",), ("unknown dataset", "mnist")),
    (("digits",), ("64 features", "--dimension 64")),
    (("separable", "--dimension", "12"), ("--dimension 12",)),
    (("diabetes",), ("regression", "--task least_squares")),
    (("regression",), ("--task least_squares",)),
    (("csv:{tmp}/small.csv", "--target", "zz"), ("no target column 'zz'", "'a', 'b', 'y'")),
    (("csv:{tmp}/small.csv", "--target", "a", "--task", "regression"), ("line 3", "'oops' is not a number")),
    (("csv:{tmp}/bad.csv",), ("line 3", "'b'", "'x' is not a number")),
    (("separable", "--size", "5"), ("too few examples", "8 nodes", "--size")),
    (("breast_cancer", "--size", "10"), ("--size does not apply",)),
    (("separable", "--target", "y"), ("--target does not apply",)),
    (("separable", "--skew", "0.5"), ("label-skew only",)),
    (("separable", "--partition", "label-skew", "--skew", "0"), ("positive",)),
    (("separable", "--seed", "-1"), ("--seed",)),
])
def test_errors_are_one_line_and_write_nothing(argv: tuple[str, ...], fragments: tuple[str, ...], topology: Path,
                                               tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "small.csv").write_text("a,b,y\n1,2,0\noops,4,1\n")
    (tmp_path / "bad.csv").write_text("a,b,y\n1,2,0\n3,x,1\n")
    code, _, err = run(capsys, "data", "split", *(a.format(tmp=tmp_path) for a in argv), "--topology",
                       str(topology), "--out", str(tmp_path / "o"))
    assert_one_line_error(code, err, *fragments)
    assert not (tmp_path / "o").exists()


def test_a_topology_that_learns_nothing_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    averaging = tmp_path / "avg.json"
    assert run(capsys, "topology", "generate", "ring", "--n", "5", "--dimension", "3", "--rounds", "5",
               "--out", str(averaging))[0] == 0
    code, _, err = run(capsys, "data", "split", "separable", "--topology", str(averaging), "--out",
                       str(tmp_path / "o"))
    assert_one_line_error(code, err, "learns no model", "--protocol muffliato-gd")


def test_a_non_empty_folder_needs_force_which_clears_stale_node_files(
    topology: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "node-3.json").write_text('{"value": [1.0]}')  # `data generate` output would shadow node-3.npz
    (out / "node-12.npz").write_bytes(b"from a split with more nodes")
    (out / "notes.txt").write_text("mine")
    base = ("data", "split", "separable", "--topology", str(topology), "--out", str(out), "--seed", "1")
    code, _, err = run(capsys, *base)
    assert_one_line_error(code, err, "not empty", "--force")
    assert run(capsys, *base, "--force")[0] == 0
    assert sorted(path.name for path in out.iterdir()) == sorted(
        [f"node-{v}.npz" for v in range(N_NODES)] + ["test.npz", "dataset.json", "notes.txt"])


def test_the_test_set_helper_checks_its_metadata(topology: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="dataset.json"):
        ld.load_test_set(tmp_path)
    split(capsys, "separable", topology, tmp_path / "o", "--size", "100", "--seed", "3")
    info, x, y = ld.load_test_set(tmp_path / "o")
    assert x.shape == (info.test_size, 30) and y.shape == (20,)
    np.savez(tmp_path / "o" / "test.npz", x=x[:5], y=y[:5])
    with pytest.raises(ConfigError, match="5 examples, dataset.json says 20"):
        ld.load_test_set(tmp_path / "o")


@pytest.mark.parametrize("change, fragment", [
    ({"train_sizes": {"0": 3}}, "train_sizes"),
    ({"skew": 0.5}, "skew"),
    ({"task": "ranking"}, "task"),
    ({"features": "raw"}, "features"),
])
def test_dataset_info_is_validated(change: dict[str, object], fragment: str, tmp_path: Path) -> None:
    document = {"dataset": "digits", "task": "classification", "dimension": 64, "n_nodes": 2, "partition": "iid",
                "skew": None, "seed": 1, "train_sizes": {"0": 3, "1": 3}, "test_size": 2,
                "features": "standardised, unit-norm rows"}
    (tmp_path / "dataset.json").write_text(json.dumps(document))
    assert ld.load_dataset_info(tmp_path).train_sizes == {0: 3, 1: 3}
    (tmp_path / "dataset.json").write_text(json.dumps({**document, **change}))
    with pytest.raises(ConfigError, match=fragment):
        ld.load_dataset_info(tmp_path)


def write_npz(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("arrays, fragment", [
    ({"x": np.array([[0.1, np.nan]]), "y": np.array([1.0])}, "NaN"),
    ({"x": np.array([[0.1, 0.2]]), "y": np.array([np.inf])}, "NaN"),
    ({"x": np.ones((3, 5)), "y": np.ones(3)}, "dimension is 2"),
    ({"x": np.ones(2), "y": np.ones(1)}, "dimension is 2"),
    ({"x": np.ones((3, 2)), "y": np.ones(2)}, "3 examples and 2 labels"),
    ({"x": np.ones((3, 2)), "y": np.ones((3, 1))}, "3 examples and 3 labels"),
    ({"x": np.ones((0, 2)), "y": np.ones(0)}, "at least one"),
    ({"x": np.ones((3, 2))}, "'y'"),
    ({"x": np.array([["a", "b"]]), "y": np.ones(1)}, "not real numbers"),
    ({"x": np.ones((1, 2)) * 1j, "y": np.ones(1)}, "complex128"),
    ({"x": np.ones((2, 2)), "y": np.array([0.0, 1.0])}, "-1 or +1, found 0"),
])
def test_the_node_loader_rejects_bad_files(arrays: dict[str, np.ndarray], fragment: str, tmp_path: Path) -> None:
    path = write_npz(tmp_path / "node-0.npz", **arrays)
    with pytest.raises(ConfigError) as caught:
        load_learning_data(path, 2, task="logistic")
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("content", [b"", b"not a zip at all\n", b"PK\x03\x04truncated"])
def test_the_node_loader_rejects_unreadable_files(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "node-0.npz"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match="cannot read a learning set"):
        load_learning_data(path, 2)


def test_the_node_loader_rejects_a_lone_array_and_a_missing_file(tmp_path: Path) -> None:
    np.save(tmp_path / "lone.npy", np.ones((3, 2)))
    (tmp_path / "lone.npy").rename(tmp_path / "lone.npz")
    with pytest.raises(ConfigError, match="single array"):
        load_learning_data(tmp_path / "lone.npz", 2)
    with pytest.raises(ConfigError, match="not found"):
        load_learning_data(tmp_path / "node-1.npz", 2)


def test_the_node_loader_reads_a_good_file_as_float64(tmp_path: Path) -> None:
    path = write_npz(tmp_path / "ok.npz", x=np.ones((4, 2), dtype=np.float32), y=np.array([1.5, 0.0, -2.0, 3.0]))
    x, y = load_learning_data(path, 2)  # regression targets: any finite reals
    assert x.dtype == y.dtype == np.float64 and x.shape == (4, 2)
