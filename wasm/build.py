"""``python wasm/build.py OUT --checkpoint RUN_DIR``: the same as ``python -m ember.wasm build``.

The builder lives in the package (core/ember/wasm/build.py) so that an installed ember can build
a site too; this file is the entry point next to the browser notes. See docs/browser.md.
"""
import sys

from ember.wasm.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["build", *sys.argv[1:]]))
