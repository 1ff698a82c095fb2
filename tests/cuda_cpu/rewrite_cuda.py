#!/usr/bin/env python3
"""Writes a copy of a .cu file that g++ compiles against tests/cuda_cpu/cuda_emu.h.

Refuses a launch not followed by check_launch(...) (the build then fails).
Two rewrites, nothing else changes (line numbers are kept, and a #line
directive points diagnostics at the original):
  name<tmpl><<<cfg>>>(args)  ->  ::trainer_emu::Launch(cfg)("name", [&] { name<tmpl>(args); })
  __shared__ T a[N];         ->  static char a_site; T (&a)[N] = ::trainer_emu::shared<T[N]>(&a_site);
Usage: rewrite_cuda.py SOURCE.cu OUTPUT.cpp
"""
import re
import sys


def matching(text, i, open_c, close_c):
    """Index just past the bracket that closes the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_c:
            depth += 1
        elif text[j] == close_c:
            depth -= 1
            if depth == 0:
                return j + 1
    raise SystemExit(f"unbalanced {open_c}{close_c} at offset {i}")


def kernel_name_start(text, end):
    """Start of `name` or `name<...>` ending at text[end]."""
    i = end
    if text[i - 1] == '>':
        depth = 0
        while True:
            i -= 1
            depth += text[i] == '>'
            depth -= text[i] == '<'
            if depth == 0:
                break
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] in '_:'):
        i -= 1
    return i


def require_check(text, after, name):
    """A launch must be followed by check_launch before the next launch or the
    end of its function (runtime/cuda/device_math.cuh): unchecked launch
    errors surface later, at an unrelated call."""
    nxt = [i for i in (text.find('<<<', after), text.find('\n}', after)) if i != -1]
    if 'check_launch(' not in text[after:min(nxt) if nxt else len(text)]:
        line = text.count('\n', 0, after) + 1
        raise SystemExit(f"line {line}: the launch of {name} is not followed by check_launch(...)")


def rewrite_launches(text):
    out, pos, count = [], 0, 0
    while (k := text.find('<<<', pos)) != -1:
        start = kernel_name_start(text, k)
        cfg_end = text.index('>>>', k)
        paren = cfg_end + 3
        while text[paren].isspace():
            paren += 1
        if text[paren] != '(':
            raise SystemExit(f"a launch without arguments at offset {k}")
        args_end = matching(text, paren, '(', ')')
        name, cfg, args = text[start:k], text[k + 3:cfg_end], text[paren:args_end]
        require_check(text, args_end, name)
        bare = re.sub(r'<.*', '', name)
        out.append(text[pos:start])
        out.append(f'::trainer_emu::Launch({cfg})("{bare}", [&] {{ {name}{args}; }})')
        pos, count = args_end, count + 1
    out.append(text[pos:])
    return ''.join(out), count


SHARED = re.compile(r'__shared__\s+([\w:]+)\s+(\w+)\[([^\]]+)\];')


def rewrite_shared(text):
    return SHARED.subn(lambda m: f'static char {m[2]}_site; {m[1]} (&{m[2]})[{m[3]}] = '
                       f'::trainer_emu::shared<{m[1]}[{m[3]}]>(&{m[2]}_site);', text)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    text = open(src).read()
    text, launches = rewrite_launches(text)
    text, shared = rewrite_shared(text)
    if '__shared__' in text or '<<<' in text:
        raise SystemExit(f"{src}: a launch or __shared__ declaration of a form the rewrite does not know")
    with open(dst, 'w') as f:
        f.write(f'#line 1 "{src}"\n{text}')
    print(f"{src}: {launches} launches, {shared} shared arrays")


if __name__ == '__main__':
    main()
