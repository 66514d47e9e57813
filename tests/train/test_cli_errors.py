"""Every bad command line is one line, ``ember: error: ...``, exit status 2, before any work:
the cases users hit, malformed checkpoints a resume or eval meets, and generated argument lists
(hypothesis) run through ``main()``. ``--dry-run`` stops a valid ``train`` after its checks, so
the generated runs never train."""

import contextlib
import io
import json
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ember.cli import main
from ember.io.checkpoint import _content_hash, latest_checkpoint

# A run made once: synthetic data (no files needed), one step, so every later use is quick.
RUN = ["synthetic-cifar10", "--model", "mlp", "--limit-train", "32", "--limit-test", "32", "--no-progress"]


def ember(*argv):
    """``main(argv)`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as e:  # argparse's own exits
            code = e.code
    return code, out.getvalue(), err.getvalue()


def assert_clean_error(code, err, *words):
    assert code == 2, err
    assert err.startswith("ember: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word in err, err


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "run"
    code, _, err = ember("train", *RUN, "--max-steps", 1, "--out", out)
    assert code == 0, err
    return out


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--batch-size", 0], ["--batch-size", ">= 1", "got 0"]),
        (["--batch-size", -1], ["--batch-size"]),
        (["--seed", -1], ["--seed", ">= 0"]),
        (["--keep-last", 0], ["--keep-last"]),
        (["--limit-test", -5], ["--limit-test"]),
        (["--limit-train", 0], ["--limit-train"]),
        (["--max-steps", 0], ["--max-steps"]),
        (["--max-steps", -1], ["--max-steps"]),
        (["--checkpoint-every", -1], ["--checkpoint-every"]),
        (["--epochs", 0], ["--epochs"]),
        (["--lr", "nan"], ["--lr", "finite"]),
        (["--clip-grad-norm", "-1"], ["--clip-grad-norm"]),
        (["--epochs", "x"], ["invalid int value"]),
        (["--model", "vgg"], ["invalid choice"]),
        (["--backend", "nope"], ["unknown backend 'nope'"]),
        (["--on-nonfinite", "ignore"], ["invalid choice"]),
    ],
)
def test_bad_train_arguments(tmp_path, argv, words):
    out = tmp_path / "run"
    assert_clean_error(*ember("train", *RUN, "--out", out, *argv)[::2], *words)
    assert not out.exists()  # nothing was done


def test_bad_paths(tmp_path, run_dir):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    assert_clean_error(*ember("train", *RUN, "--out", a_file)[::2], "is a file")
    assert_clean_error(*ember("train", *RUN, "--out", a_file / "run")[::2], "is a file")
    assert_clean_error(*ember("train", *RUN, "--out", tmp_path / "missing", "--resume")[::2], "does not exist")
    assert_clean_error(*ember("train", *RUN, "--out", tmp_path, "--resume")[::2], "no complete checkpoint")
    assert_clean_error(*ember("train", *RUN, "--out", run_dir)[::2], "pass --resume")
    assert_clean_error(*ember("eval", tmp_path / "missing")[::2], "does not exist", "no run directory")
    assert_clean_error(*ember("eval", run_dir, "--limit-test", -3)[::2], "--limit-test")
    assert_clean_error(*ember("eval", run_dir, "--batch-size", 0)[::2], "--batch-size")
    assert_clean_error(*ember("checkpoints", "inspect", a_file)[::2], "not a directory")
    shaped = tmp_path / "shaped"
    (shaped / "ckpt-00000005.safetensors").mkdir(parents=True)  # a directory named like a checkpoint
    (shaped / "ckpt-00000005.json").mkdir()
    assert_clean_error(*ember("eval", shaped)[::2], "no complete checkpoint")
    assert_clean_error(*ember("train", *RUN, "--out", shaped, "--resume")[::2], "no complete checkpoint")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_directories(tmp_path, run_dir):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        assert_clean_error(*ember("train", *RUN, "--out", locked / "run")[::2], "cannot write")
        plot_dir = tmp_path / "plot"
        plot_dir.mkdir()
        (plot_dir / "metrics.jsonl").write_text((run_dir / "metrics.jsonl").read_text())
        plot_dir.chmod(0o555)
        pytest.importorskip("matplotlib")
        assert_clean_error(*ember("checkpoints", "plot", plot_dir)[::2], "cannot write")
    finally:
        locked.chmod(0o755)


def test_a_valid_dry_run_does_nothing(tmp_path):
    code, out, err = ember("train", *RUN, "--out", tmp_path / "run", "--dry-run")
    assert code == 0, err
    assert json.loads(out)["dataset"] == "synthetic-cifar10" and not (tmp_path / "run").exists()


def edit_sidecar(run, change):
    """Apply ``change(sidecar)`` to the newest checkpoint's sidecar and re-seal its checksum,
    as a deliberate edit would: only the schema can catch what is wrong."""
    path = latest_checkpoint(run)[: -len(".safetensors")] + ".json"
    sidecar = json.loads(open(path).read())
    change(sidecar)
    sidecar["sidecar_sha256"] = _content_hash(sidecar)
    with open(path, "w") as f:
        f.write(json.dumps(sidecar))


def drop(*keys):
    def change(s):
        target = s["meta"]
        for k in keys[:-1]:
            target = target[k]
        del target[keys[-1]]

    return change


def put(value, *keys):
    def change(s):
        target = s["meta"]
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value

    return change


@pytest.mark.parametrize(
    "change, words",
    [
        (drop("optimizer"), ["meta.optimizer is missing"]),
        (drop("loader"), ["meta.loader is missing"]),
        (drop("scheduler"), ["meta.scheduler is missing"]),
        (drop("rng"), ["meta.rng is missing"]),
        (drop("extra"), ["extra must be an object"]),
        (drop("rng", "offset"), ["rng.offset is missing"]),
        (put("x", "loader", "batch"), ["loader.batch must be an int"]),
        (put(-1, "loader", "epoch"), ["loader.epoch must be an int >= 0"]),
        (put(10**6, "extra", "batch"), ["extra.batch is 1000000"]),
        (put({"loss": 1}, "extra", "meters"), ["extra.meters"]),
        (put(5, "extra", "history"), ["extra.history must be a list"]),
        (put({"state": {}, "param_groups": []}, "optimizer"), ["optimizer does not fit"]),
        (put("vgg", "config", "model"), ["config.model must be one of"]),
        (put("imagenet", "config", "dataset"), ["config.dataset must be one of"]),
        (put(0, "config", "batch_size"), ["config.batch_size"]),
    ],
)
def test_a_malformed_sidecar_is_a_clean_error_on_resume_and_eval(tmp_path, run_dir, change, words):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    edit_sidecar(run, change)
    assert_clean_error(*ember("train", *RUN, "--out", run, "--resume")[::2], *words)
    if words[0].startswith("config"):
        assert_clean_error(*ember("eval", run)[::2], *words)


# ---------------------------------------------------------------------------------------------
# Generated argument lists

INTS = st.one_of(st.integers(-3, 4), st.integers(-(2**70), 2**70)).map(str) | st.sampled_from(["", "x", "1.5", "1e3"])
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3)).map(str) | st.just("x")
FLAGS = {
    **dict.fromkeys(
        (
            "--epochs",
            "--batch-size",
            "--seed",
            "--checkpoint-every",
            "--keep-last",
            "--max-steps",
            "--limit-train",
            "--limit-test",
        ),
        INTS,
    ),
    **dict.fromkeys(("--lr", "--momentum", "--weight-decay", "--clip-grad-norm"), FLOATS),
    "--optimizer": st.sampled_from(["sgd", "adam", "lbfgs", ""]),
    "--schedule": st.sampled_from(["none", "cosine", "step", "poly"]),
    "--model": st.sampled_from(["mlp", "cnn", "vgg"]),
    "--backend": st.sampled_from(["numpy", "python", "nope", ""]),
    "--on-nonfinite": st.sampled_from(["stop", "skip", "warn"]),
    "--out": st.sampled_from(["FRESH", "FILE", "RUN", "EMPTY"]),
    "--data-root": st.sampled_from(["FRESH", "FILE", "EMPTY"]),
}
SWITCHES = ["--resume", "--no-jit", "--no-progress", "--augment", "--no-augment", "--bogus"]
PAIRS = st.lists(
    st.one_of(
        st.sampled_from(sorted(FLAGS)).flatmap(lambda f: st.tuples(st.just(f), FLAGS[f])),
        st.sampled_from(SWITCHES).map(lambda s: (s,)),
    ),
    max_size=6,
)
COMMANDS = st.one_of(
    st.tuples(st.just("train"), st.sampled_from(["mnist", "fashion-mnist", "synthetic-cifar10", "imagenet"]), PAIRS),
    st.tuples(
        st.just("eval"),
        st.sampled_from(["RUN", "FILE", "EMPTY", "FRESH"]),
        st.lists(st.tuples(st.sampled_from(["--batch-size", "--limit-test"]), INTS), max_size=2),
    ),
    st.tuples(
        st.just("checkpoints"),
        st.sampled_from(["inspect", "plot", "show"]),
        st.lists(st.sampled_from([("--verify",), ("--bogus",)]), max_size=1),
    ),
)


@settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(command=COMMANDS)
def test_generated_command_lines_never_escape_as_tracebacks(run_dir, command):
    base = tempfile.mkdtemp()
    places = {
        "FRESH": os.path.join(base, "fresh"),
        "FILE": os.path.join(base, "file"),
        "RUN": str(run_dir),
        "EMPTY": base,
    }
    open(places["FILE"], "w").close()
    sub, target, pairs = command
    argv = [sub, places.get(target, target)]
    for pair in pairs:
        argv += [places.get(v, v) for v in pair]
    if sub == "checkpoints":
        argv.append(places["RUN"])
    if sub == "train":
        argv.append("--dry-run")  # a valid command line stops after its checks
    if sub == "eval":
        argv += ["--limit-test", "8"]  # a valid eval stays small
    code, _, err = ember(*argv)
    assert code in (0, 1, 2), (argv, code, err)
    if code == 2:
        assert err.startswith("ember: error: ") and err.count("\n") == 1, (argv, err)
    assert "Traceback" not in err
