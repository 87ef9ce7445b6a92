"""`python -m controlplane.cli`, as the `controlplane` console script."""

import sys

from controlplane.cli import main

sys.exit(main())
