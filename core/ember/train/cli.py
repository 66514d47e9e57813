"""``ember train``, ``ember eval`` and ``ember checkpoints``: argument parsing and wiring only."""

from __future__ import annotations

import json
import math
import os
import sys

from ..errors import EmberError
from ..io.checkpoint import latest_checkpoint, read_checkpoint
from . import recipes, runs
from .callbacks import MONITORS
from .checks import check_arguments, check_config, check_run_dir


def add_subcommands(sub) -> None:
    t = sub.add_parser(
        "train",
        help="train a model on a dataset",
        description="Train a model; flags override the recipe for the dataset and model.",
    )
    t.add_argument(
        "dataset",
        choices=sorted(recipes.DATASETS),
        help="the dataset to train on; text trains a character model on FILE",
    )
    t.add_argument("file", nargs="?", default=None, help="text: the UTF-8 text file to train on")
    t.add_argument(
        "--model",
        default=None,
        choices=sorted(recipes.RECIPES),
        help="the model from ember.models (default: transformer for text, else mlp)",
    )
    t.add_argument(
        "--epochs", type=int, metavar="N", help="passes over the training set (" + recipes.default_help("epochs") + ")"
    )
    t.add_argument(
        "--batch-size", type=int, metavar="N", help="samples per step (" + recipes.default_help("batch_size") + ")"
    )
    t.add_argument("--lr", type=float, metavar="X", help="peak learning rate (" + recipes.default_help("lr") + ")")
    t.add_argument(
        "--optimizer",
        choices=["sgd", "adam", "adamw", "rmsprop"],
        help="the optimizer (" + recipes.default_help("optimizer") + ")",
    )
    t.add_argument(
        "--momentum", type=float, metavar="X", help="SGD momentum (" + recipes.default_help("momentum") + ")"
    )
    t.add_argument(
        "--weight-decay",
        type=float,
        metavar="X",
        help="L2 weight decay; AdamW's decoupled decay is 0.01 when this is 0 ("
        + recipes.default_help("weight_decay")
        + ")",
    )
    t.add_argument(
        "--schedule",
        choices=["none", "cosine", "step"],
        help="learning-rate schedule, stepped every batch (" + recipes.default_help("schedule") + ")",
    )
    t.add_argument(
        "--augment",
        action=argparse_bool(),
        default=None,
        help="random crops and flips of the training images (" + recipes.default_help("augment") + ")",
    )
    t.add_argument(
        "--seq-len",
        type=int,
        default=None,
        metavar="N",
        help=f"text: characters per training sequence (default: {recipes.SEQ_LEN})",
    )
    t.add_argument(
        "--clip-grad-norm",
        type=float,
        default=None,
        metavar="X",
        help="clip the global gradient norm to X (default: no clipping)",
    )
    t.add_argument(
        "--backend", default=None, help="numpy, python, numba, cupy, ... (default: EMBER_BACKEND, else numpy)"
    )
    t.add_argument(
        "--out",
        default=None,
        help="run directory (default: runs/DATASET-MODEL for the first run, then runs/DATASET-MODEL-2, "
        "-3, ...: a new run never overwrites one)",
    )
    t.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest checkpoint in --out, or without --out in the newest "
        "runs/DATASET-MODEL[-N] (default: start a new run)",
    )
    t.add_argument(
        "--seed", type=int, default=0, help="seed of initialisation, shuffling and augmentation (default: 0)"
    )
    t.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        metavar="N",
        help="also checkpoint every N steps (default: at the end of each epoch only)",
    )
    t.add_argument("--keep-last", type=int, default=3, metavar="N", help="checkpoints kept in --out (default: 3)")
    t.add_argument(
        "--max-steps",
        type=int,
        default=None,
        metavar="N",
        help="pause after N steps in total, checkpointed; --resume continues the run (default: run all epochs)",
    )
    t.add_argument(
        "--early-stop",
        type=int,
        default=None,
        metavar="PATIENCE",
        help="stop when --monitor has not improved for PATIENCE epochs (default: run all epochs)",
    )
    t.add_argument(
        "--keep-best",
        type=int,
        default=None,
        metavar="K",
        help="also keep the K best checkpoints by --monitor in OUT/best, deleting the rest "
        "(default: none kept apart from --keep-last)",
    )
    t.add_argument(
        "--lr-plateau",
        type=int,
        default=None,
        metavar="PATIENCE",
        help="multiply the learning rate by 0.1 when --monitor has not improved for PATIENCE epochs; "
        "replaces --schedule (default: off)",
    )
    t.add_argument(
        "--monitor",
        choices=list(MONITORS),
        default=None,
        help="the epoch metric --early-stop, --keep-best and --lr-plateau watch; accuracies are "
        "maximised, losses minimised (default: eval_loss)",
    )
    t.add_argument(
        "--on-nonfinite",
        choices=["stop", "skip"],
        default="stop",
        help="a NaN/inf loss or gradient: stop with an error, or skip that update (default: stop)",
    )
    t.add_argument(
        "--limit-train",
        type=int,
        default=None,
        metavar="N",
        help="use only the first N training samples (default: all)",
    )
    t.add_argument(
        "--limit-test", type=int, default=None, metavar="N", help="use only the first N test samples (default: all)"
    )
    t.add_argument(
        "--data-root", default=None, help="dataset cache directory (default: EMBER_DATA, else ~/.cache/ember/datasets)"
    )
    t.add_argument("--no-progress", action="store_true", help="no progress bar (default: show one)")
    t.add_argument(
        "--no-jit",
        action="store_true",
        help="run each training step eagerly instead of compiled by ember.jit (EMBER_JIT=0 "
        "does this everywhere; default: compiled)",
    )
    t.add_argument(
        "--dry-run",
        action="store_true",
        help="check the arguments and the run directory, print the settings as JSON, and exit (default: train)",
    )
    t.add_argument(
        "--distributed",
        action="store_true",
        help="data-parallel over MPI ranks (launch with mpiexec -n N); --batch-size is global (default: one process)",
    )
    t.add_argument(
        "--dist-timeout",
        type=float,
        default=None,
        metavar="S",
        help="--distributed: seconds a rank waits for the others before the job is aborted "
        "(default: EMBER_DIST_TIMEOUT, else 300)",
    )
    t.set_defaults(run=run_train)

    e = sub.add_parser("eval", help="evaluate a checkpoint on its dataset's test split")
    e.add_argument(
        "checkpoint",
        nargs="?",
        default=None,
        help="a run directory or a ckpt-*.safetensors file (default: the run under runs/ whose "
        "newest checkpoint was written last)",
    )
    e.add_argument("--json", action="store_true", help="print one JSON object (default: a table)")
    e.add_argument("--batch-size", type=int, default=500, metavar="N", help="samples per batch (default: 500)")
    e.add_argument(
        "--data-root", default=None, help="dataset cache directory (default: EMBER_DATA, else ~/.cache/ember/datasets)"
    )
    e.add_argument(
        "--limit-test", type=int, default=None, metavar="N", help="use only the first N test samples (default: all)"
    )
    e.add_argument(
        "--backend", default=None, help="numpy, python, numba, cupy, ... (default: EMBER_BACKEND, else numpy)"
    )
    e.set_defaults(run=run_eval)

    c = sub.add_parser("checkpoints", help="inspect or plot a run directory")
    c.add_argument("action", choices=["inspect", "plot"], help="list the checkpoints, or write the curves as PNG")
    c.add_argument("directory", help="a run directory (ember train --out)")
    c.add_argument(
        "--verify",
        action="store_true",
        help="inspect: also load every file as `ember eval` would, checksums and a full parse; exit status 1 if any fails (default: sizes only)",
    )
    c.set_defaults(run=run_checkpoints)


def argparse_bool():
    import argparse

    return argparse.BooleanOptionalAction


def _config(args) -> dict:
    cfg = recipes.recipe(args.dataset, args.model)
    for key in ("epochs", "batch_size", "lr", "optimizer", "momentum", "weight_decay", "schedule", "augment"):
        value = getattr(args, key)
        if value is not None:
            cfg[key] = value
    cfg.update(
        dataset=args.dataset,
        model=args.model,
        seed=args.seed,
        limit_train=args.limit_train,
        limit_test=args.limit_test,
        clip_grad_norm=args.clip_grad_norm,
    )
    if (args.dataset == "text") != (args.file is not None):
        raise EmberError(
            "ember train text needs a FILE: ember train text FILE"
            if args.file is None
            else f"{args.file}: only ember train text takes a file ({args.dataset} finds its own data)"
        )
    if args.seq_len is not None and args.dataset != "text":
        raise EmberError("--seq-len is for text runs (ember train text FILE)")
    if args.dataset == "text":
        from ..data.text import read_text

        path = os.path.abspath(args.file)
        cfg.update(text_file=path, seq_len=args.seq_len or recipes.SEQ_LEN, vocab="".join(sorted(set(read_text(path)))))
    watched = {k: getattr(args, k) for k in ("early_stop", "keep_best", "lr_plateau") if getattr(args, k)}
    if watched:
        cfg.update(watched, monitor=args.monitor or "eval_loss")
    elif args.monitor:
        raise EmberError("--monitor needs --early-stop, --keep-best or --lr-plateau")
    if args.lr_plateau:
        if args.schedule not in (None, "none"):
            raise EmberError(
                f"--lr-plateau sets the learning rate by the metric; it cannot run with "
                f"--schedule {args.schedule} (drop one)"
            )
        cfg["schedule"] = "none"
    return cfg


def _callbacks(cfg) -> list:
    """The Trainer callbacks the config asks for (--early-stop, --keep-best, --lr-plateau)."""
    from . import callbacks as C

    table = {
        "early_stop": lambda n: C.EarlyStopping(cfg["monitor"], patience=n),
        "keep_best": lambda k: C.ModelCheckpoint(cfg["monitor"], save_top_k=k),
        "lr_plateau": lambda n: C.ReduceLROnPlateau(cfg["monitor"], patience=n),
    }
    return [make(cfg[key]) for key, make in table.items() if cfg.get(key)]


def _loaders(cfg, data_root, for_eval_only=False, eval_batch_size=500):
    from ..data import DataLoader

    text = (cfg["text_file"], cfg["seq_len"], cfg["vocab"]) if cfg["dataset"] == "text" else None
    train_set, test_set = recipes.build_datasets(
        cfg["dataset"], data_root, cfg.get("limit_train"), cfg.get("limit_test"), text
    )
    test_loader = DataLoader(test_set, batch_size=eval_batch_size, transform=recipes.transforms(cfg["dataset"], False))
    if for_eval_only:
        return None, test_loader
    train_loader = DataLoader(
        train_set,
        batch_size=cfg["batch_size"],
        shuffle=True,
        seed=cfg["seed"],
        transform=recipes.transforms(cfg["dataset"], cfg["augment"]),
    )
    return train_loader, test_loader


def run_train(args) -> int:
    if args.model is None:
        args.model = recipes.TEXT_MODELS[0] if args.dataset == "text" else "mlp"
    if args.distributed:
        return _run_distributed(args)
    return _train(args)


def _run_distributed(args) -> int:
    """Every rank runs the same training; a rank that fails ends the whole job at once
    (otherwise the others would wait forever in the next all-reduce)."""
    from .. import distributed as dist

    check_arguments(args)
    dist.init(timeout=args.dist_timeout)
    try:
        return _train(args, dist)
    except BaseException as exc:  # noqa: BLE001
        if dist.world_size() > 1 and not isinstance(exc, SystemExit):
            if isinstance(exc, EmberError):  # a user's error: one line, as on one rank
                print(
                    f"ember: error: rank {dist.rank()}: {' '.join(str(exc).split())}; aborting all "
                    f"{dist.world_size()} ranks",
                    file=sys.stderr,
                )
                dist.abort(2)
            import traceback

            print(f"ember: rank {dist.rank()} failed; aborting all {dist.world_size()} ranks", file=sys.stderr)
            traceback.print_exc()
            dist.abort(1)
        raise


def _train(args, dist=None) -> int:
    import ember

    from .trainer import Trainer

    check_arguments(args)  # every check before any work: nothing is half done
    if args.backend:
        ember.use(args.backend)
    out = _run_dir(args)
    check_run_dir(out, args.resume)
    if args.data_root is not None and os.path.exists(args.data_root) and not os.path.isdir(args.data_root):
        raise EmberError(f"--data-root {args.data_root} is a file, not a directory")
    cfg = _config(args)
    if args.resume:
        path = latest_checkpoint(out)
        assert path is not None  # check_run_dir raised if there was none
        saved = check_config(path, read_checkpoint(path)[1].get("config"))
        # Callbacks are settings of the run too: resuming without them would drop their state.
        watched = {k: None for k in ("early_stop", "keep_best", "lr_plateau", "monitor") if k in saved}
        differs = {k: (saved.get(k), v) for k, v in {**watched, **cfg}.items() if k in saved and saved[k] != v}
        if differs:
            raise EmberError(
                f"--resume: the run in {out} was started with different settings "
                + ", ".join(f"{k}: {a!r} then, {b!r} now" for k, (a, b) in differs.items())
            )
    if args.dry_run:
        print(json.dumps({**cfg, "out": out, "resume": args.resume}))
        return 0
    ember.manual_seed(cfg["seed"])
    model = recipes.build_model(cfg["model"], cfg["dataset"], cfg)
    train_loader, test_loader = _loaders(cfg, args.data_root)
    is_main = True
    if dist is not None:
        from ..distributed.sharding import ShardedLoader

        rank, world = dist.rank(), dist.world_size()
        model = dist.DistributedDataParallel(model)
        train_loader = ShardedLoader(train_loader, rank, world)
        test_loader = ShardedLoader(test_loader, rank, world)
        is_main = rank == 0
    optimizer = recipes.build_optimizer(
        model.parameters(), cfg["optimizer"], cfg["lr"], cfg["momentum"], cfg["weight_decay"]
    )
    scheduler = recipes.build_scheduler(optimizer, cfg["schedule"], cfg["epochs"] * len(train_loader))
    trainer = Trainer(
        model,
        optimizer,
        train_loader,
        loss_fn=recipes.loss_fn(cfg["dataset"]),
        eval_loader=test_loader,
        scheduler=scheduler,
        scheduler_interval="step",
        out_dir=out,
        checkpoint_every=args.checkpoint_every,
        keep_last=args.keep_last,
        progress=not args.no_progress,
        clip_grad_norm=cfg["clip_grad_norm"],
        config=cfg,
        is_main=is_main,
        jit=not args.no_jit,
        on_nonfinite=args.on_nonfinite,
        callbacks=_callbacks(cfg),
    )
    if args.resume:
        trainer.resume(out)
        print(f"resumed {out} at step {trainer.step} (epoch {trainer.epoch}, batch {trainer._batch})", file=sys.stderr)
    backend = ember.get_backend()
    if is_main:
        print(
            f"training {cfg['model']} on {cfg['dataset']} ({len(train_loader.dataset)} samples) with "
            f"backend {backend.name}, {sum(p.numel() for p in model.parameters()):,} parameters -> {out}"
            + (f", {dist.world_size()} ranks" if dist is not None else ""),
            file=sys.stderr,
        )
    history = trainer.fit(cfg["epochs"], max_steps=args.max_steps)
    if is_main:
        _report_callbacks(trainer)
        if cfg["dataset"] == "text" and not trainer.paused:
            _print_sample(trainer.model, test_loader.dataset, cfg["seed"])
    if is_main and trainer.paused:
        print(json.dumps({"step": trainer.step, "epoch": trainer.epoch, "paused": True}))
    elif history and is_main:
        print(json.dumps({"step": trainer.step, **history[-1]}))
    return 0


def _print_sample(model, test_set, seed, length=200) -> None:
    """What the character model writes after the first characters of the test split."""
    from .text import generate

    text = test_set.dataset if hasattr(test_set, "indices") else test_set  # a --limit-test Subset
    prompt = text.arrays[0][0][: max(1, text.seq_len // 2)]
    print(f"sample ({length} characters after {text.decode(prompt)!r}):")
    print(text.decode(generate(model, prompt, length, seed=seed)))


def _run_dir(args) -> str:
    """--out as given; else a new version of runs/DATASET-MODEL, or with --resume the newest."""
    if args.out:
        return args.out
    base = os.path.join(runs.ROOT, f"{args.dataset}-{args.model}")
    if args.resume:
        return runs.newest_version(base) or base
    return runs.next_run_dir(base)


def _report_callbacks(trainer) -> None:
    """Tell the user what the callbacks did: an early stop, the best checkpoint."""
    from .callbacks import EarlyStopping, ModelCheckpoint

    for cb in trainer.callbacks:
        if isinstance(cb, EarlyStopping) and cb.stopped_epoch is not None:
            print(cb.reason(), file=sys.stderr)
        if isinstance(cb, ModelCheckpoint) and cb.best_model_path:
            print(f"best {cb.watch.monitor} {cb.best_model_score:.4g}: {cb.best_model_path}", file=sys.stderr)


def run_eval(args) -> int:
    import ember

    from .state import load_training_state
    from .trainer import Trainer

    check_arguments(args)
    path = args.checkpoint or runs.newest_run()
    if path is None:
        raise EmberError(f"no run to evaluate: {runs.ROOT}/ holds none; name a run directory or checkpoint file")
    if not os.path.exists(path):
        known = runs.run_names(os.path.dirname(os.path.normpath(path)) or ".")
        raise EmberError(
            f"{path} does not exist: no run directory or checkpoint file of that name"
            + (f" (runs there: {', '.join(known[:8])})" if known else "")
        )
    if args.backend:
        ember.use(args.backend)
    _, meta = read_checkpoint(path)
    cfg = dict(check_config(path, meta.get("config")))
    if args.limit_test:
        cfg["limit_test"] = args.limit_test
    model = recipes.build_model(cfg["model"], cfg["dataset"], cfg)
    load_training_state(path, model)
    _, test_loader = _loaders(cfg, args.data_root, for_eval_only=True, eval_batch_size=args.batch_size)
    trainer = Trainer(
        model, None, None, loss_fn=recipes.loss_fn(cfg["dataset"]), eval_loader=test_loader, progress=False
    )
    classes = recipes.class_names(cfg["dataset"])
    result = trainer.evaluate(per_class=len(classes) if classes else None)
    per_class = result.pop("per_class", None)
    summary = {
        "checkpoint": os.fspath(path),
        "step": meta["step"],
        "dataset": cfg["dataset"],
        "model": cfg["model"],
        **result,
    }
    if args.json:
        print(json.dumps({**summary, **({"per_class": dict(zip(classes, per_class))} if per_class else {})}))
        return 0
    print(eval_table(summary, len(test_loader.dataset), dict(zip(classes, per_class)) if per_class else None))
    return 0


def eval_table(summary: dict, samples: int, per_class: dict | None = None) -> str:
    """``ember eval``'s table: what was evaluated, then metric and value, then per class.

    >>> print(eval_table({"checkpoint": "runs/a/ckpt-00000010.safetensors", "step": 10, "dataset": "mnist",
    ...                   "model": "mlp", "loss": 0.25, "accuracy": 0.9}, 100, {"0": 1.0, "1": 0.8}))
    runs/a/ckpt-00000010.safetensors: mlp on mnist, step 10, 100 test samples
    metric      value
    loss       0.2500
    accuracy   90.00%
    <BLANKLINE>
    class    accuracy
    0         100.00%
    1          80.00%
    """
    rows = [
        (
            f"{summary['checkpoint']}: {summary['model']} on {summary['dataset']}, step {summary['step']}, "
            f"{samples} test samples"
        ),
        f"{'metric':8} {'value':>8}",
        f"{'loss':8} {summary['loss']:8.4f}",
        f"{'accuracy':8} {_percent(summary['accuracy']):>8}",
    ]
    if per_class:
        width = max(8, *(len(name) for name in per_class))
        rows += ["", f"{'class':{width}} {'accuracy':>8}"]
        rows += [f"{name:{width}} {_percent(value):>8}" for name, value in per_class.items()]
    return "\n".join(rows)


def _percent(value: float) -> str:
    return "-" if math.isnan(value) else f"{100 * value:.2f}%"


def run_checkpoints(args) -> int:
    from ..io.checkpoint import list_checkpoints
    from .logbook import plot_curves

    if not os.path.isdir(args.directory):
        raise EmberError(f"{args.directory} is not a directory")
    if args.action == "plot":
        try:
            print(plot_curves(args.directory))
        except OSError as e:
            raise EmberError(f"cannot write the plot in {args.directory}: {e.strerror or e}") from None
        return 0
    rows = list_checkpoints(args.directory, verify=args.verify)
    if not rows:
        print(f"no checkpoints in {args.directory}")
        return 1
    print(f"{'step':>8}  {'size':>10}  {'tensors':>7}  status  file")
    for r in rows:
        size = "-" if r.size is None else f"{r.size:,}"
        print(
            f"{r.step:>8}  {size:>10}  {r.num_tensors if r.num_tensors is not None else '-':>7}  "
            f"{r.status:6}  {os.path.basename(r.path)}"
        )
    return 1 if args.verify and any(r.status != "ok" for r in rows) else 0
