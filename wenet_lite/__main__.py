import sys

from wenet_lite.cli import main

sys.exit(main())
