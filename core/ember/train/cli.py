"""``ember train``, ``ember eval`` and ``ember checkpoints``: argument parsing and wiring only."""
from __future__ import annotations

import json
import os
import sys

from ..errors import EmberError
from ..io.checkpoint import latest_checkpoint, read_checkpoint
from . import recipes
from .checks import check_arguments, check_config, check_run_dir


def add_subcommands(sub) -> None:
    t = sub.add_parser("train", help="train a model on a dataset",
                       description="Train a model; flags override the recipe for the dataset and model.")
    t.add_argument("dataset", choices=sorted(recipes.DATASETS), help="the dataset to train on")
    t.add_argument("--model", default="mlp", choices=sorted(recipes.RECIPES),
                   help="the model from ember.models (default: mlp)")
    t.add_argument("--epochs", type=int, metavar="N", help="passes over the training set ("
                   + recipes.default_help("epochs") + ")")
    t.add_argument("--batch-size", type=int, metavar="N", help="samples per step (" + recipes.default_help("batch_size") + ")")
    t.add_argument("--lr", type=float, metavar="X", help="peak learning rate (" + recipes.default_help("lr") + ")")
    t.add_argument("--optimizer", choices=["sgd", "adam", "adamw", "rmsprop"],
                   help="the optimizer (" + recipes.default_help("optimizer") + ")")
    t.add_argument("--momentum", type=float, metavar="X", help="SGD momentum (" + recipes.default_help("momentum") + ")")
    t.add_argument("--weight-decay", type=float, metavar="X",
                   help="L2 weight decay; AdamW's decoupled decay is 0.01 when this is 0 ("
                   + recipes.default_help("weight_decay") + ")")
    t.add_argument("--schedule", choices=["none", "cosine", "step"],
                   help="learning-rate schedule, stepped every batch (" + recipes.default_help("schedule") + ")")
    t.add_argument("--augment", action=argparse_bool(), default=None,
                   help="random crops and flips of the training images (" + recipes.default_help("augment") + ")")
    t.add_argument("--clip-grad-norm", type=float, default=None, metavar="X",
                   help="clip the global gradient norm to X (default: no clipping)")
    t.add_argument("--backend", default=None, help="numpy, python, numba, cupy, ... (default: EMBER_BACKEND, else numpy)")
    t.add_argument("--out", default=None, help="run directory (default: runs/DATASET-MODEL)")
    t.add_argument("--resume", action="store_true",
                   help="continue from the newest checkpoint in --out (default: start a new run)")
    t.add_argument("--seed", type=int, default=0, help="seed of initialisation, shuffling and augmentation (default: 0)")
    t.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="also checkpoint every N steps (default: at the end of each epoch only)")
    t.add_argument("--keep-last", type=int, default=3, metavar="N", help="checkpoints kept in --out (default: 3)")
    t.add_argument("--max-steps", type=int, default=None, metavar="N",
                   help="pause after N steps in total, checkpointed; --resume continues the run (default: run all epochs)")
    t.add_argument("--on-nonfinite", choices=["stop", "skip"], default="stop",
                   help="a NaN/inf loss or gradient: stop with an error, or skip that update (default: stop)")
    t.add_argument("--limit-train", type=int, default=None, metavar="N",
                   help="use only the first N training samples (default: all)")
    t.add_argument("--limit-test", type=int, default=None, metavar="N", help="use only the first N test samples (default: all)")
    t.add_argument("--data-root", default=None, help="dataset cache directory (default: EMBER_DATA, else ~/.cache/ember/datasets)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar (default: show one)")
    t.add_argument("--no-jit", action="store_true",
                   help="run each training step eagerly instead of compiled by ember.jit (EMBER_JIT=0 "
                        "does this everywhere; default: compiled)")
    t.add_argument("--dry-run", action="store_true",
                   help="check the arguments and the run directory, print the settings as JSON, and exit "
                        "(default: train)")
    t.add_argument("--distributed", action="store_true",
                   help="data-parallel over MPI ranks (launch with mpiexec -n N); --batch-size is global "
                        "(default: one process)")
    t.add_argument("--dist-timeout", type=float, default=None, metavar="S",
                   help="--distributed: seconds a rank waits for the others before the job is aborted "
                        "(default: EMBER_DIST_TIMEOUT, else 300)")
    t.set_defaults(run=run_train)

    e = sub.add_parser("eval", help="evaluate a checkpoint on its dataset's test split")
    e.add_argument("checkpoint", help="a run directory or a ckpt-*.safetensors file")
    e.add_argument("--batch-size", type=int, default=500, metavar="N", help="samples per batch (default: 500)")
    e.add_argument("--data-root", default=None, help="dataset cache directory (default: EMBER_DATA, else ~/.cache/ember/datasets)")
    e.add_argument("--limit-test", type=int, default=None, metavar="N", help="use only the first N test samples (default: all)")
    e.add_argument("--backend", default=None, help="numpy, python, numba, cupy, ... (default: EMBER_BACKEND, else numpy)")
    e.set_defaults(run=run_eval)

    c = sub.add_parser("checkpoints", help="inspect or plot a run directory")
    c.add_argument("action", choices=["inspect", "plot"], help="list the checkpoints, or write the curves as PNG")
    c.add_argument("directory", help="a run directory (ember train --out)")
    c.add_argument("--verify", action="store_true", help="inspect: also load every file as `ember eval` would, checksums and a full parse; exit status 1 if any fails (default: sizes only)")
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
    cfg.update(dataset=args.dataset, model=args.model, seed=args.seed, limit_train=args.limit_train,
               limit_test=args.limit_test, clip_grad_norm=args.clip_grad_norm)
    return cfg


def _loaders(cfg, data_root, for_eval_only=False, eval_batch_size=500):
    from ..data import DataLoader
    train_set, test_set = recipes.build_datasets(cfg["dataset"], data_root, cfg.get("limit_train"),
                                                 cfg.get("limit_test"))
    test_loader = DataLoader(test_set, batch_size=eval_batch_size, transform=recipes.transforms(cfg["dataset"], False))
    if for_eval_only:
        return None, test_loader
    train_loader = DataLoader(train_set, batch_size=cfg["batch_size"], shuffle=True, seed=cfg["seed"],
                              transform=recipes.transforms(cfg["dataset"], cfg["augment"]))
    return train_loader, test_loader


def run_train(args) -> int:
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
            if isinstance(exc, EmberError):          # a user's error: one line, as on one rank
                print(f"ember: error: rank {dist.rank()}: {' '.join(str(exc).split())}; aborting all "
                      f"{dist.world_size()} ranks", file=sys.stderr)
                dist.abort(2)
            import traceback
            print(f"ember: rank {dist.rank()} failed; aborting all {dist.world_size()} ranks", file=sys.stderr)
            traceback.print_exc()
            dist.abort(1)
        raise


def _train(args, dist=None) -> int:
    import ember
    from .trainer import Trainer
    check_arguments(args)                    # every check before any work: nothing is half done
    if args.backend:
        ember.use(args.backend)
    out = args.out or os.path.join("runs", f"{args.dataset}-{args.model}")
    check_run_dir(out, args.resume)
    if args.data_root is not None and os.path.exists(args.data_root) and not os.path.isdir(args.data_root):
        raise EmberError(f"--data-root {args.data_root} is a file, not a directory")
    cfg = _config(args)
    if args.resume:
        path = latest_checkpoint(out)
        saved = check_config(path, read_checkpoint(path)[1].get("config"))
        differs = {k: (saved.get(k), v) for k, v in cfg.items() if k in saved and saved[k] != v}
        if differs:
            raise EmberError(f"--resume: the run in {out} was started with different settings "
                             + ", ".join(f"{k}: {a!r} then, {b!r} now" for k, (a, b) in differs.items()))
    if args.dry_run:
        print(json.dumps({**cfg, "out": out, "resume": args.resume}))
        return 0
    ember.manual_seed(cfg["seed"])
    model = recipes.build_model(cfg["model"], cfg["dataset"])
    train_loader, test_loader = _loaders(cfg, args.data_root)
    is_main = True
    if dist is not None:
        from ..distributed.sharding import ShardedLoader
        rank, world = dist.rank(), dist.world_size()
        model = dist.DistributedDataParallel(model)
        train_loader = ShardedLoader(train_loader, rank, world)
        test_loader = ShardedLoader(test_loader, rank, world)
        is_main = rank == 0
    optimizer = recipes.build_optimizer(model.parameters(), cfg["optimizer"], cfg["lr"], cfg["momentum"],
                                        cfg["weight_decay"])
    scheduler = recipes.build_scheduler(optimizer, cfg["schedule"], cfg["epochs"] * len(train_loader))
    trainer = Trainer(model, optimizer, train_loader, eval_loader=test_loader, scheduler=scheduler,
                      scheduler_interval="step",
                      out_dir=out, checkpoint_every=args.checkpoint_every, keep_last=args.keep_last,
                      progress=not args.no_progress, clip_grad_norm=cfg["clip_grad_norm"], config=cfg,
                      is_main=is_main, jit=not args.no_jit, on_nonfinite=args.on_nonfinite)
    if args.resume:
        trainer.resume(out)
        print(f"resumed {out} at step {trainer.step} (epoch {trainer.epoch}, batch {trainer._batch})",
              file=sys.stderr)
    backend = ember.get_backend()
    if is_main:
        print(f"training {cfg['model']} on {cfg['dataset']} ({len(train_loader.dataset)} samples) with "
              f"backend {backend.name}, {sum(p.numel() for p in model.parameters()):,} parameters -> {out}"
              + (f", {dist.world_size()} ranks" if dist is not None else ""), file=sys.stderr)
    history = trainer.fit(cfg["epochs"], max_steps=args.max_steps)
    if is_main and trainer.paused:
        print(json.dumps({"step": trainer.step, "epoch": trainer.epoch, "paused": True}))
    elif history and is_main:
        print(json.dumps({"step": trainer.step, **history[-1]}))
    return 0


def run_eval(args) -> int:
    import ember
    from .state import load_training_state
    from .trainer import Trainer
    check_arguments(args)
    if not os.path.exists(args.checkpoint):
        raise EmberError(f"{args.checkpoint}: no such file or directory")
    if args.backend:
        ember.use(args.backend)
    _, meta = read_checkpoint(args.checkpoint)
    cfg = dict(check_config(args.checkpoint, meta.get("config")))
    if args.limit_test:
        cfg["limit_test"] = args.limit_test
    model = recipes.build_model(cfg["model"], cfg["dataset"])
    load_training_state(args.checkpoint, model)
    _, test_loader = _loaders(cfg, args.data_root, for_eval_only=True, eval_batch_size=args.batch_size)
    trainer = Trainer(model, None, None, eval_loader=test_loader, progress=False)
    result = trainer.evaluate()
    print(json.dumps({"checkpoint": os.fspath(args.checkpoint), "step": meta["step"], "dataset": cfg["dataset"],
                      "model": cfg["model"], **result}))
    return 0


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
        print(f"{r.step:>8}  {size:>10}  {r.num_tensors if r.num_tensors is not None else '-':>7}  "
              f"{r.status:6}  {os.path.basename(r.path)}")
    return 1 if args.verify and any(r.status != "ok" for r in rows) else 0
