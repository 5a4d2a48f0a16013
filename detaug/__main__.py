"""``python -m detaug demo ...``: the ``detaug`` command."""
import sys

from .cli.main import main

sys.exit(main())
