# Entry point of the packaged desktop app: gui/app.py's main().
import sys

from gui.app import main

sys.exit(main())
