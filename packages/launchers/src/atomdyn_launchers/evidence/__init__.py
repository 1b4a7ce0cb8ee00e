"""Evidence of runs: parse a run directory, judge its validity gates, and write sanitized evidence.

``collect`` turns ``runs/<run-id>/`` into ``evidence/<run-id>/``; ``verify`` judges a run or checks collected
evidence; ``report`` appends results/RESULTS.md and regenerates the README's "Result at a glance".
"""
