"""The rows-touched curve's number of points (`replay inspect --curve-points`, `replay fit
--check`): its default and its most. Standard library only, so that the command's options
(and `replay inspect --help`) load without numpy.
"""

from __future__ import annotations

# the batch counts the curve is evaluated at (`replay.trace.keys.curve_batches`)
DEFAULT_CURVE_POINTS = 64

# at most: the curve is printed as JSON and drawn, where 100,000 points are already more
# than any plot resolves (8 B each in 3 arrays; a billion took 18 s and 7.7 GB before it
# failed)
MAX_CURVE_POINTS = 100_000

__all__ = ["DEFAULT_CURVE_POINTS", "MAX_CURVE_POINTS"]
