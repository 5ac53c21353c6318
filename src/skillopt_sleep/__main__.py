import sys

from skillopt_sleep.cli import main

sys.exit(main())
