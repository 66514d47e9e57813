"""``python -m ember.wasm build OUT --checkpoint RUN_DIR | --onnx MODEL.onnx``: assemble the browser demo site.

Then serve it: ``python -m http.server -d OUT`` and open http://127.0.0.1:8000/ (see
docs/browser.md).
"""

from __future__ import annotations

import argparse
import sys

from .build import BuildError, build_site


def _floats(text):
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ember.wasm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="assemble the static site")
    b.add_argument("out", help="output directory (created; its pyodide/ folder is replaced)")
    model = b.add_mutually_exclusive_group(required=True)
    model.add_argument("--checkpoint", help="an `ember train` run directory, or a ckpt-*.safetensors / .json file")
    model.add_argument(
        "--onnx",
        metavar="MODEL.onnx",
        help="an ONNX image classifier, input (N, C, H, W) (converted at build time; needs ember[onnx])",
    )
    b.add_argument(
        "--mean",
        type=_floats,
        default=None,
        help="with --onnx: per-channel mean subtracted from pixels in [0, 1] (default 0), e.g. 0.485,0.456,0.406",
    )
    b.add_argument("--std", type=_floats, default=None, help="with --onnx: per-channel std divided by (default 1)")
    b.add_argument("--pyodide", default=None, help="folder of the npm package pyodide@314.0.7")
    b.add_argument("--wheels", default=None, help="folder holding the micropip and pluggy wheels")
    b.add_argument("--ember-wheel", default=None, help="use this ember wheel instead of building one")
    b.add_argument(
        "--extra-wheel",
        action="append",
        default=[],
        help="another wheel to bundle and list in the lock (e.g. numpy's Pyodide wheel)",
    )
    b.add_argument("--fetch", action="store_true", help="fetch missing Pyodide/wheels with npm and pip")
    args = parser.parse_args(argv)
    try:
        site = build_site(
            args.out,
            args.checkpoint,
            onnx=args.onnx,
            mean=args.mean,
            std=args.std,
            pyodide_dir=args.pyodide,
            wheels_dir=args.wheels,
            ember_wheel=args.ember_wheel,
            extra_wheels=args.extra_wheel,
            fetch=args.fetch,
        )
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"built {args.out}: {site['model_name']} on {site['dataset']}, Pyodide {site['pyodide']}, "
        f"{site['ember_wheel']}; serve it with: python -m http.server -d {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
