# Entry point of the packaged desktop app: gui/app.py's main().
import multiprocessing
import sys

multiprocessing.freeze_support()  # PDFs are read in a worker process: this program again (see entry_cli.py)

from gui.app import main

sys.exit(main())
