#!/usr/bin/python3
"""docs/ARCHITECTURE.md stays a map a newcomer reads in one sitting: under
400 lines. Figures go to docs/PERFORMANCE.md, faults to docs/RELIABILITY.md,
data to docs/DATA.md, exports to docs/EXPORT.md.

usage: doc_length_check.py ARCHITECTURE.md
"""
import sys

LIMIT = 400

lines = open(sys.argv[1], encoding="utf-8").read().count("\n")
if lines >= LIMIT:
    print(f"FAIL {sys.argv[1]}: {lines} lines, the limit is {LIMIT - 1}: say it shorter, or move detail to the "
          f"docs it names (figures: PERFORMANCE.md, faults: RELIABILITY.md)")
    sys.exit(1)
print(f"ok   {sys.argv[1]}: {lines} lines (under {LIMIT})")
