# Entry point of the packaged `pms` console program: the CLI of pms.py.
import sys

import pms

sys.exit(pms.main())
