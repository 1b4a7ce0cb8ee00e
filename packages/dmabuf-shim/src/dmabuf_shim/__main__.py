import sys

from dmabuf_shim.cli import main

sys.exit(main())
