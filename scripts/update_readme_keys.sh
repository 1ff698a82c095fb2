#!/usr/bin/env bash
# Rewrites README.md's recipe-key table from `trainer train --keys-markdown`
# (the table in recipe/recipe_keys.cpp); tests/e2e/readme_keys_check.py holds them equal.
set -euo pipefail
cd "$(dirname "$0")/.."
table=$("${TRAINER:-build/trainer}" train --keys-markdown)
/usr/bin/python3 - "$table" <<'PY'
import sys
table = sys.argv[1] + "\n"
text = open("README.md").read()
begin, end = "<!-- recipe-keys:begin", "<!-- recipe-keys:end -->"
a = text.index("\n", text.index(begin)) + 1
b = text.index(end)
open("README.md", "w").write(text[:a] + table + text[b:])
PY
echo "README.md: recipe-key table updated"
