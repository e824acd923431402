import sys

from autotune.cli._main import main

sys.exit(main())
