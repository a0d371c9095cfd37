"""``python -m kvd`` is the same as the ``kvd`` console script."""

import sys

from kvd.cli import main

sys.exit(main())
