"""`python -m cactus_core ...`: see cactus_core.cli."""

import sys

from cactus_core.cli import main

sys.exit(main())
