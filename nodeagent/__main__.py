"""`python -m nodeagent`: same as the `nodeagent` console script."""

import sys

from nodeagent.cli import main

sys.exit(main())
