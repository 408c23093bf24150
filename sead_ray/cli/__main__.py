"""`python -m sead_ray.cli`, as the `sead-ray` command."""
import sys

from sead_ray.cli.main import main

sys.exit(main())
