"""The README's table of recipe keys (between the recipe-keys markers) is
exactly what `trainer train --keys-markdown` prints from recipe/recipe_keys.cpp,
so the documentation cannot drift from the code. To refresh it:
    scripts/update_readme_keys.sh
And its table of exit codes has a row for each code `trainer --help` lists
(runtime/errors.h kExitCodes), in that order, and no other.

usage: readme_keys_check.py TRAINER README.md
"""
import re
import subprocess
import sys

BEGIN, END = "<!-- recipe-keys:begin", "<!-- recipe-keys:end -->"


def main():
    trainer, readme = sys.argv[1], sys.argv[2]
    table = subprocess.run([trainer, "train", "--keys-markdown"], capture_output=True, text=True, check=True).stdout
    text = open(readme).read()
    start = text.find(BEGIN)
    body = text[text.index("\n", start) + 1:text.find(END)] if start >= 0 and END in text else None
    if body != table:
        print("README.md's recipe-key table differs from `trainer train --keys-markdown`; "
              "run scripts/update_readme_keys.sh")
        sys.exit(1)
    print(f"ok   README table matches the key table ({table.count(chr(10)) - 2} keys)")
    usage = subprocess.run([trainer, "--help"], capture_output=True, text=True, check=True).stdout
    listed = re.findall(r"(?m)^ +(\d+|128\+N) +\S", usage.split("exit codes:\n", 1)[-1])
    section = text.split("## Exit codes", 1)[-1].split("\n#", 1)[0]
    rows = re.findall(r"(?m)^\| (\d+|128\+N) \|", section)
    if not listed or rows != listed:
        print(f"README.md's exit-code table lists {rows}; `trainer --help` lists {listed} (runtime/errors.h kExitCodes)")
        sys.exit(1)
    print(f"ok   README's exit codes are the {len(listed)} that `trainer --help` lists")


if __name__ == "__main__":
    main()
