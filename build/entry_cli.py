# Entry point of the packaged `pms` console program: the CLI of pms.py.
# On Linux, pms-gui is a symbolic link to this program: called by that name,
# it starts the desktop app instead (see pms.spec).
import multiprocessing
import sys
from pathlib import Path

# PDFs are read in a worker process (pms.pdf.PdfReader): in a frozen program that
# worker is this program again, and freeze_support() makes it run the worker.
multiprocessing.freeze_support()
if Path(sys.argv[0]).name.startswith("pms-gui"):
    from gui.app import main
else:
    from pms import main

sys.exit(main())
