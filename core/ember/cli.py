"""The ``ember`` command line.

    ember train mnist [--model mlp|cnn|resnet18] [--epochs N] [--backend numba] [--out DIR] [--resume]
    ember eval CKPT                   accuracy of a saved model on its dataset's test split
    ember checkpoints inspect DIR     list the checkpoints in a run directory
    ember checkpoints plot DIR        write the training curves of a run as PNG
    ember backends [--json]           the backends ember can see, with status and capabilities
    ember certify NAME [...]          run the conformance suite on a backend, write a certificate
    ember onnx run|test [...]         run an ONNX model or the official ONNX suite (docs/onnx.md)

Each subcommand's work lives in its own module; this file only parses arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .errors import EmberError, user_frame, where


def _backends(args) -> int:
    from . import registry

    rows = registry.backends()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'name':10} {'version':10} {'status':12} {'devices':10} ops  origin")
    for r in rows:
        status = r["status"] if len(r["status"]) < 12 else r["status"][:11] + "…"
        print(
            f"{r['name']:10} {r.get('version', '?'):10} {status:12} "
            f"{','.join(r.get('devices', [])):10} {r.get('ops', '-'):>3}  {r.get('origin', '')}"
        )
        if r["status"] != "ok":
            print(f"    {r['status']}")
    return 0


def _certify(argv) -> int:
    from .conformance.certify import main

    return main(argv)


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line (``ember: error: ...``, exit 2) instead of the usage
    text: the same shape as every other error ember reports."""

    def error(self, message):
        self.exit(
            2,
            f"ember: error: {self.prog.removeprefix('ember ')}: {message}\n"
            if self.prog != "ember"
            else f"ember: error: {message}\n",
        )


def _onnx(argv) -> int:
    from .onnx.cli import main

    return main(argv)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = Parser(prog="ember", description="ember: train and run models on any backend")
    p.add_argument("--version", action="version", version=f"ember {__version__}", help="print ember's version and exit")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("backends", help="list backends and their status")
    b.add_argument("--json", action="store_true", help="machine-readable output (default: a table)")

    from .train import cli as train_cli

    train_cli.add_subcommands(sub)

    sub.add_parser(
        "certify", help="certify a backend with the conformance suite (see `ember certify -h`)", add_help=False
    )
    sub.add_parser("onnx", help="run ONNX models and the official ONNX suite (see `ember onnx -h`)", add_help=False)
    return p


def main(argv=None) -> int:
    """Run one ``ember`` command; return its exit status. Output cut off by its reader
    (``ember certify numpy | head``) ends the command quietly, with status 141 as for any
    program a closed pipe stops, rather than a traceback."""
    try:
        status = _command(argv)
        sys.stdout.flush()  # inside the try: a closed pipe shows itself on the last flush too
        return status
    except BrokenPipeError:
        # what is left in stdout's buffer would fail again when Python exits
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _command(argv) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["certify"]:
        return _certify(argv[1:])
    if argv[:1] == ["onnx"]:
        return _onnx(argv[1:])
    # Errors end with the user's source line; from the command line that line is only the
    # launcher calling main(), which tells the user nothing: it is cut from the message.
    launcher = where(user_frame(2))
    args = build_parser().parse_args(argv)
    try:
        if args.command == "backends":
            return _backends(args)
        return args.run(args)
    except BrokenPipeError:
        raise  # not the machine saying no: the reader stopped reading (main)
    except (EmberError, OSError) as err:  # OSError: the machine said no (disk full, permission)
        text = str(err).replace(launcher, "") if launcher else str(err)
        print(f"ember: error: {' '.join(text.split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ember: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
