"""``python -m service.cli`` runs the bandit CLI."""

import sys

from service.cli import main

sys.exit(main())
