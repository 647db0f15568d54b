import sys

from tools.jit_kernels.cli import main

sys.exit(main())
