"""``python -m ember.primitives > docs/primitives.md``: the contract page, from the records."""

import sys

from . import markdown

sys.stdout.write(markdown())
