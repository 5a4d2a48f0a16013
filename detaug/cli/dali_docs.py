"""``python -m detaug.cli.dali_docs``: docs/dali.md's list "Not in detaug", generated from DALI's
table of ``fn`` names (detaug/dali/fn_names.py) minus every op registered now."""
from __future__ import annotations

import sys


def main() -> int:
    import detaug  # noqa: F401  (registers every op)
    from detaug.dali.fn_names import not_in_detaug_markdown
    from detaug.ops.registry import ALIASES, REGISTRY

    sys.stdout.write(not_in_detaug_markdown(list(REGISTRY) + list(ALIASES)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
