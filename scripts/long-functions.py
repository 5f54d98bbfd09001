#!/usr/bin/env python3
"""Lists functions in crates/*/src longer than a limit (default 80 lines),
and whether a one-line reason comment sits right above them (a `//`
comment line directly above the doc comment or the signature).

    scripts/long-functions.py [LIMIT]          # every long function
    scripts/long-functions.py --unexplained    # exit 1 if one lacks a reason
    scripts/long-functions.py --root DIR       # another crates folder

Run by the test crates/lazyinit-bench/tests/long_functions.rs (in
scripts/test.sh), which fails on a long function with no reason.
"""
import os
import re
import sys

FN = re.compile(r'^(\s*)(pub(\([a-z]+\))?\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)')


def functions(path):
    lines = open(path).read().split('\n')
    i = 0
    while i < len(lines):
        m = FN.match(lines[i])
        if not m or lines[i].rstrip().endswith(';'):
            i += 1
            continue
        indent, name = m.group(1), m.group(6)
        # The body ends at the first line that closes at the signature's indent.
        j = i
        while j < len(lines) and not lines[j].startswith(indent + '{') and not lines[j].rstrip().endswith('{'):
            j += 1
        k = j + 1
        while k < len(lines) and lines[k] != indent + '}':
            k += 1
        # A reason: a `//` (not `///`) line above the docs and attributes.
        a = i - 1
        while a >= 0 and (lines[a].strip().startswith('///') or lines[a].strip().startswith('#[')):
            a -= 1
        reason = a >= 0 and lines[a].strip().startswith('//') and not lines[a].strip().startswith('///')
        yield name, i + 1, k - i + 1, reason
        i += 1


def main():
    args = sys.argv[1:]
    strict = '--unexplained' in args
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'crates')
    if '--root' in args:
        at = args.index('--root')
        root = args[at + 1]
        del args[at:at + 2]
    nums = [a for a in args if a.isdigit()]
    limit = int(nums[0]) if nums else 80
    found = []
    for dirpath, _, files in os.walk(root):
        if os.sep + 'src' not in dirpath:
            continue
        for f in files:
            if f.endswith('.rs'):
                p = os.path.join(dirpath, f)
                for name, line, n, reason in functions(p):
                    if n > limit:
                        found.append((n, os.path.relpath(p, os.path.join(root, '..')), line, name, reason))
    found.sort(reverse=True)
    for n, p, line, name, reason in found:
        print(f"{n:4} {p}:{line} {name}{'' if reason else '  (no reason above it)'}")
    missing = [f for f in found if not f[4]]
    print(f"{len(found)} over {limit} lines, {len(missing)} without a reason")
    sys.exit(1 if strict and missing else 0)


main()
