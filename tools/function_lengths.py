#!/usr/bin/env python3
"""Lists C++ function bodies longer than a limit (issue 57: no function over 150 lines outside tests).

    tools/function_lengths.py [--limit 150] [--root DIR] [FILE...]
    tools/function_lengths.py --self-test     # checks the scanner on hand-made sources

Without files it reads every tracked .cc/.h/.cu outside tests/ (`git ls-files`). A function body is a `{`
whose preceding code ends in a parameter list (`)`, possibly followed by const, noexcept, override, a trailing
return type or a constructor's initialiser list) at namespace or class scope; its length is the lines from
the line of its name to its closing brace. Comments, strings and character literals are blanked first, so
braces inside them do not count. Lambdas count toward the function that holds them. Prints
`file:line: name: N lines` for each one over the limit and exits 1 if there is any.
"""
import argparse
import os
import re
import subprocess
import sys

CONTROL = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype", "alignof", "static_assert"}


def blank(text):
    """Comments, strings and char literals replaced by spaces (newlines kept, so line numbers stay)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def function_name(head):
    """The name before the parameter list that `head` (code before a `{`) ends with, or None."""
    head = head.rstrip()
    # Strip what may follow the parameter list: qualifiers, trailing return type, initialiser list.
    depth = 0
    k = len(head) - 1
    # Walk back to the `)` that closes the parameter list, skipping an initialiser list `: a(x), b{y}`.
    tail = re.sub(r"\s+", " ", head[-400:])
    if re.search(r"(\b(const|noexcept|override|final|mutable)\s*$)|->[^;{}()]*$|\)\s*$", tail) is None:
        # A constructor's initialiser list ends in `)` or `}`, handled by the generic search below.
        if not re.search(r"[)}]\s*$", tail):
            return None
    # Find the parameter list: the last top-level (...) followed only by qualifiers/initialisers.
    braces = 0  # a member's brace initialiser `b_{2}` in a constructor's initialiser list
    while k >= 0:
        ch = head[k]
        if ch == "}" and depth == 0:
            braces += 1
        elif ch == "{" and depth == 0 and braces > 0:
            braces -= 1
        elif braces > 0:
            pass
        elif ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                m = re.search(r"([A-Za-z_~][\w:<>~,\s]*?)\s*$", head[:k])
                if m:
                    name = m.group(1).strip().split()[-1] if m.group(1).strip() else ""
                    before = head[:k].rstrip()
                    if name in CONTROL or not name:
                        return None
                    # An initialiser-list entry `: x_(a), y_(b) {`: keep walking back to the ctor's own list.
                    if re.search(r"[:,]\s*[\w:]+$", before) and not re.search(r"::\s*[\w~]+$", before):
                        k -= 1
                        continue
                    if re.search(r"[=+\-*/%&|^!<>]\s*$", before[: len(before) - len(name)]) and "operator" not in before[-40:]:
                        return None
                    return name
                return None
        elif ch in ";{}" and depth == 0:
            return None
        k -= 1
    return None


def long_functions(path, text, limit):
    code = blank(text)
    found = []
    stack = []  # (kind, start line, name)
    last = 0  # index after the last ; { or } at the current scope
    line = 1
    for i, ch in enumerate(code):
        if ch == "\n":
            line += 1
        elif ch == "{":
            inside_function = any(k == "function" for k, _, _ in stack)
            head = code[last:i]
            name = None if inside_function else function_name(head)
            if not inside_function and not name and re.search(r"\)\s*:[^;{}]*[\w>]\s*$", head):
                stack.append(("init", line, None))  # `b_{2}` in an initialiser list: part of the head
                continue
            if name:
                name_line = code.count("\n", 0, last + len(code[last:i]) - len(code[last:i].lstrip())) + 1
                stack.append(("function", name_line, name))
            else:
                stack.append(("scope", line, None))
            last = i + 1
        elif ch == "}":
            if stack:
                kind, start, name = stack.pop()
                if kind == "function" and line - start + 1 > limit:
                    found.append((start, name, line - start + 1))
                if kind == "init":
                    continue
            last = i + 1
        elif ch == ";":
            last = i + 1
        elif ch == "#" and (i == 0 or code[i - 1] == "\n"):
            pass
    return found


def self_test():
    """Hand-made sources whose function lengths are known; returns the number of failures."""
    body = "  int x = 0;\n" * 10
    cases = [
        # (source, limit, expected [(line, name, lines)])
        ("int F() {\n" + body + "}\n", 5, [(1, "F", 12)]),
        ("int F() {\n" + body + "}\n", 12, []),
        # braces inside strings, characters and comments do not open scopes
        ("void G(int a) {\n  const char* s = \"{{{\";\n  char c = '{';  // {\n  /* { */\n}\n", 3, [(1, "G", 5)]),
        # a lambda counts toward the function holding it; a class's member and a constructor's initialiser list
        ("struct S {\n  S() : a_(1), b_{2} {\n    int y = 0;\n  }\n  int a_, b_;\n  void M() const {\n"
         "    auto f = [](int q) {\n      return q;\n    };\n  }\n};\n", 2, [(2, "S", 3), (6, "M", 5)]),
        # namespaces and control statements are not functions
        ("namespace n {\nvoid H() {\n  if (true) {\n    for (;;) {\n    }\n  }\n}\n}  // namespace n\n", 5,
         [(2, "H", 6)]),
        # qualified names and a trailing return type
        ("auto A::B(int v) -> int {\n" + body + "}\n", 11, [(1, "A::B", 12)]),
    ]
    failures = 0
    for src, limit, want in cases:
        got = long_functions("<case>", src, limit)
        if got != want:
            print(f"self-test: expected {want}, got {got} for:\n{src}")
            failures += 1
    print(f"self-test: {len(cases) - failures} of {len(cases)} cases right")
    return failures


def main():
    if "--self-test" in sys.argv[1:]:
        return 1 if self_test() else 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--limit", type=int, default=150)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args()
    files = args.files
    if not files:
        listed = subprocess.run(["git", "ls-files", "*.cc", "*.h", "*.cu"], cwd=args.root, capture_output=True,
                                text=True, check=True).stdout.split()
        files = [os.path.join(args.root, f) for f in listed if not f.startswith("tests/")]
    bad = 0
    for f in files:
        with open(f, encoding="utf-8") as fh:
            text = fh.read()
        # Preprocessor lines are not code that opens scopes.
        text = re.sub(r"(?m)^[ \t]*#.*(\\\n.*)*$", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
        for start, name, n in long_functions(f, text, args.limit):
            print(f"{os.path.relpath(f, args.root)}:{start}: {name}: {n} lines")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
