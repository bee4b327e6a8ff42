"""What a pattern may cost Spark's regex engine per value, read from its text: `LIKE` made linear, `regexp_*`
bounded (docs/security.md, "Load input limits").

Spark matches `LIKE` and the `regexp_*` functions with `java.util.regex`, which backtracks without bound and does
not stop when its task is cancelled: `v LIKE '%a%a%a%a%b'` or `regexp_extract(v, '(a+)+b', 1)` on one long value
keeps a core busy for hours, and its load's timeout cannot end it. Doris runs both on linear engines (its own
LIKE, RE2), so a Doris user's pattern never needs what makes Java's engine slow. Here:

- `like_regex`: a `LIKE` pattern with two or more `%` becomes a regex whose middle parts are atomic, lazy and
  tried leftmost (correct for `LIKE`, whose parts have fixed lengths), so a value is scanned about once per part.
  Spark already turns the other patterns into `startsWith`, `endsWith`, `contains` or one `.*`.
- `regex_cost`: a `regexp_*` pattern is refused when it backtracks exponentially (backreferences, lookaround, a
  repeated group that holds a choice); otherwise its cost per value is at most about `n * (n + 1) ** unbounded *
  choices` steps for a value of `n` characters (`find` tries every start), and `max_subject` is the longest value
  that stays within `STEPS`: a longer value fails the load instead of wedging a core.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp


class PatternRefused(ValueError):
    """A pattern a load expression or a query may not use; its text says why."""


STEPS = 200_000_000  # the backtracking steps a value may cost (~0.2-2 s of one core)
WIDE = 64  # a bounded quantifier with more choices than this counts as unbounded (`a{0,100000}`)
MAX_CHOICES = 1_000_000  # bounded quantifiers and alternations together: more is refused


@dataclass
class _Group:
    alternatives: int = 1
    choice: bool = False  # a quantifier with a choice or an alternation inside (nested groups included)
    start: int = 0


@dataclass(frozen=True)
class RegexCost:
    """A pattern's backtracking: `unbounded` quantifiers (`*`, `+`, `{n,}`, a wide `{n,m}`) and the product of the
    other choices (a bounded quantifier's counts, an alternation's branches)."""

    unbounded: int = 0
    choices: int = 1

    def steps(self, n: int) -> int:
        return int(n * (n + 1) ** self.unbounded * self.choices)

    def max_subject(self, budget: int = STEPS) -> int:
        """The longest value (characters) whose worst case stays within `budget` steps."""
        low, high = 0, budget
        while low < high:  # the largest n with steps(n) <= budget
            mid = (low + high + 1) // 2
            if self.steps(mid) <= budget:
                low = mid
            else:
                high = mid - 1
        return low


@dataclass
class _Scan:
    pattern: str
    unbounded: int = 0
    choices: int = 1
    groups: list[_Group] = field(default_factory=lambda: [_Group()])

    def refuse(self, why: str) -> PatternRefused:
        return PatternRefused(f"regular expression '{self.pattern}' is refused: {why}")


def regex_cost(pattern: str) -> RegexCost:
    """The backtracking a Java regex may cost (see the module's text).

    Raises:
        PatternRefused: a pattern that may backtrack exponentially, or has too many choices.
    """
    scan = _Scan(pattern)
    i, n = 0, len(pattern)
    last: _Group | bool | None = None  # what a quantifier would repeat: a closed group, an atom (True), nothing
    while i < n:
        c = pattern[i]
        if c == "\\":
            i, last = _escape(scan, i), True
        elif c == "[":
            i, last = _class_end(scan, i), True
        elif c == "(":
            i = _open(scan, i)
            last = None
        elif c == ")":
            if len(scan.groups) == 1:
                raise scan.refuse("unbalanced parenthesis")
            group = scan.groups.pop()
            _count_alternatives(scan, group)
            scan.groups[-1].choice |= group.choice
            i, last = i + 1, group
        elif c == "|":
            scan.groups[-1].alternatives += 1
            scan.groups[-1].choice = True
            i, last = i + 1, None
        elif c in "*+?" or (c == "{" and _bounds(pattern, i) is not None):
            i = _quantifier(scan, i, last)
            last = None
        else:
            i, last = i + 1, True
    if len(scan.groups) != 1:
        raise scan.refuse("unbalanced parenthesis")
    _count_alternatives(scan, scan.groups[0])
    return RegexCost(scan.unbounded, scan.choices)


def _count_alternatives(scan: _Scan, group: _Group) -> None:
    scan.choices *= group.alternatives
    if scan.choices > MAX_CHOICES:
        raise scan.refuse("too many alternatives and counted repetitions")


def _escape(scan: _Scan, i: int) -> int:
    """The index after the escape at `i`. Raises: PatternRefused for a backreference."""
    pattern = scan.pattern
    if i + 1 >= len(pattern):
        raise scan.refuse("it ends with a backslash")
    nxt = pattern[i + 1]
    if nxt in "123456789" or nxt == "k":
        raise scan.refuse("backreferences are not supported")
    if nxt == "Q":  # quoted up to \E
        end = pattern.find("\\E", i + 2)
        return len(pattern) if end < 0 else end + 2
    if nxt in "pPx" and i + 2 < len(pattern) and pattern[i + 2] == "{":
        end = pattern.find("}", i + 3)
        return len(pattern) if end < 0 else end + 1
    return i + 2


def _class_end(scan: _Scan, i: int) -> int:
    """The index after the character class opening at `i` (nested classes, escapes, a leading `]` or `^]`)."""
    pattern, depth, j = scan.pattern, 0, i
    while j < len(pattern):
        c = pattern[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            depth += 1
            j += 1
            if pattern.startswith("^", j):
                j += 1
            if pattern.startswith("]", j):  # a literal ] first in the class
                j += 1
            continue
        if c == "]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise scan.refuse("unclosed character class")


def _open(scan: _Scan, i: int) -> int:
    """Open a group at `i`; the index after its opener. Raises: PatternRefused for lookaround."""
    pattern = scan.pattern
    if pattern.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
        raise scan.refuse("lookaround is not supported")
    j = i + 1
    if pattern.startswith("?", j):
        if pattern.startswith(("?:", "?>"), j):
            j += 2
        elif pattern.startswith("?<", j):  # a named group
            end = pattern.find(">", j)
            j = len(pattern) if end < 0 else end + 1
        else:  # inline flags: (?i) alone, or (?i:X)
            k = j + 1
            while k < len(pattern) and pattern[k] in "idmsuxU-":
                k += 1
            if k < len(pattern) and pattern[k] == ")":
                return k + 1
            j = k + 1
    scan.groups.append(_Group(start=i))
    return j


def _bounds(pattern: str, i: int) -> tuple[int, int | None, int] | None:
    """`{n}`, `{n,}` or `{n,m}` at `i`: (n, m or None, the index after it); None when it is not one."""
    end = pattern.find("}", i)
    if end < 0:
        return None
    low, comma, high = pattern[i + 1 : end].partition(",")
    if not low.isdigit() or (high and not high.isdigit()):
        return None
    return int(low), (int(high) if high else None) if comma else int(low), end + 1


def _quantifier(scan: _Scan, i: int, last: _Group | bool | None) -> int:
    """Count the quantifier at `i` (repeating `last`); the index after it (and a lazy or possessive mark)."""
    pattern = scan.pattern
    c = pattern[i]
    if c == "{":
        bounds = _bounds(pattern, i)
        assert bounds is not None
        low, high, end = bounds
    else:
        low, high, end = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c] + (i + 1,)
    if end < len(pattern) and pattern[end] in "?+":
        end += 1
    if isinstance(last, _Group) and last.choice and (high is None or high > 1):  # `(.*a){12}`: 12 of them
        raise scan.refuse("a repeated group holds a quantifier or an alternation (it may backtrack exponentially)")
    if high is not None and high <= low:
        return end  # a fixed count: no choice
    scan.groups[-1].choice = True
    if high is None or high - low > WIDE:
        scan.unbounded += 1
    else:
        scan.choices *= high - low + 1
        if scan.choices > MAX_CHOICES:
            raise scan.refuse("too many alternatives and counted repetitions")
    return end


# -- LIKE ----------------------------------------------------------------------------------------------------------
_PUNCTUATION = frozenset("\\^$.|?*+()[]{}-&#!:<>=,'\"/@%~`;")


def like_parts(pattern: str) -> list[list[str | None]] | None:
    """A `LIKE` pattern (escape `\\`, as Spark's) split at its `%`: each part a list of literal characters and
    None for `_`; None when an escape is one Spark refuses (Spark then reports it, as before)."""
    parts: list[list[str | None]] = [[]]
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if i + 1 >= len(pattern) or pattern[i + 1] not in "\\%_":
                return None
            parts[-1].append(pattern[i + 1])
            i += 2
            continue
        if c == "%":
            parts.append([])
        else:
            parts[-1].append(None if c == "_" else c)
        i += 1
    return parts


def like_regex(pattern: str) -> str | None:
    """The linear regex (for `RLIKE`) that matches what `LIKE pattern` matches, for a pattern with two or more
    `%`; None for the others (Spark's own rewrites are linear for them)."""
    parts = like_parts(pattern)
    if parts is None or len(parts) < 3:
        return None

    def part(chars: list[str | None]) -> str:
        return "".join("." if c is None else ("\\" + c if c in _PUNCTUATION else c) for c in chars)

    first, *middle, last = parts
    # leftmost and committed: a later part never makes an earlier one move (fixed lengths), so no backtracking
    return "(?s)\\A" + part(first) + "".join(f"(?>.*?{part(p)})" for p in middle if p) + ".*" + part(last) + "\\z"


# -- a tree's patterns ---------------------------------------------------------------------------------------------
# Spark's functions that match a pattern argument (`expression`) against a subject (`this`) with java.util.regex
_REGEX_CALLS: dict[type[exp.Expression], str] = {
    exp.RegexpLike: "RLIKE",
    exp.RegexpILike: "RLIKE",
    exp.RegexpExtract: "regexp_extract",
    exp.RegexpExtractAll: "regexp_extract_all",
    exp.RegexpReplace: "regexp_replace",
    exp.RegexpCount: "regexp_count",
    exp.RegexpInstr: "regexp_instr",
    exp.RegexpSplit: "split",
}


def bound_patterns(tree: exp.Expression, *, longest_value: int) -> exp.Expression:
    """A copy of `tree` in which no pattern can make Spark's regex engine backtrack for long: a `LIKE` with two or
    more `%` becomes the `RLIKE` of `like_regex`; a regex call refuses (`raise_error`) a subject longer than its
    pattern's `max_subject` instead of running it, unless no value can be that long (`longest_value`). Patterns
    must be constant strings (a pattern read from the data could be anything). Doris's `regexp_extract(s, p, n)`
    keeps its third argument as Spark's group index.

    Raises:
        PatternRefused: a pattern that is not a constant string, or a regex `regex_cost` refuses.
    """

    def constant(pattern: exp.Expression | None, function: str) -> str | None:
        if isinstance(pattern, exp.Null):
            return None
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            fragment = pattern.sql(dialect="doris") if pattern is not None else ""
            raise PatternRefused(f"the pattern of {function} must be a constant string, got '{fragment}'")
        return str(pattern.this)

    def like(node: exp.Like | exp.ILike) -> exp.Expression:
        pattern = node.expression
        if isinstance(pattern, exp.Any | exp.All):  # LIKE ANY (...): each pattern as a LIKE of its own would be
            for each in pattern.find_all(exp.Literal):
                if like_regex(constant(each, "LIKE") or "") is not None:
                    raise PatternRefused(f"LIKE ANY / ALL takes patterns with at most one '%' here: '{each.this}'")
            return node
        text = constant(pattern, "LIKE")
        if text is None:
            return node
        subject = node.this
        if isinstance(node, exp.ILike):  # Spark's ILIKE: lower(value) LIKE lower(pattern)
            text, subject = text.lower(), exp.Lower(this=subject)
        linear = like_regex(text)
        return node if linear is None else exp.RegexpLike(this=subject, expression=exp.Literal.string(linear))

    def bound(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Like | exp.ILike):
            return like(node)
        function = _REGEX_CALLS.get(type(node))
        if isinstance(node, exp.StrToMap):  # its two delimiters are regexes, its subject the text
            texts = [constant(d, "str_to_map") for d in (node.args.get("pair_delim"), node.args.get("key_value_delim"))]
            patterns = [t for t in texts if t is not None]
            return _guarded(node, "str_to_map", patterns, longest_value) if patterns else node
        if function is None:
            return node
        if isinstance(node, exp.RegexpExtract) and node.args.get("position") is not None:
            # Doris's third argument is the group (Spark's idx); sqlglot reads it as a position Spark lacks
            node = node.copy()
            node.set("group", node.args["position"])
            node.set("position", None)
        if isinstance(node, exp.RegexpSplit) and not isinstance(node.expression, exp.Literal):
            return node  # Doris's split(s, d): sqlglot quotes the delimiter (\\Q...\\E), a literal for Spark
        text = constant(node.expression, function)
        return node if text is None else _guarded(node, function, [text], longest_value)

    return tree.copy().transform(bound, copy=False)


def _guarded(node: exp.Expression, function: str, patterns: list[str], longest_value: int) -> exp.Expression:
    """`node` behind a check of its subject's length, when a pattern could backtrack too long on a longer one."""
    longest = min(regex_cost(pattern).max_subject() for pattern in patterns)
    if longest >= longest_value:
        return node
    shown = "', '".join(patterns)
    refusal = (
        f"{function} refuses a value longer than {longest} characters: its pattern '{shown}' could backtrack "
        "for too long on it (docs/security.md)"
    )
    too_long = exp.GT(this=exp.Length(this=node.this.copy()), expression=exp.Literal.number(longest))
    raise_error = exp.Anonymous(this="raise_error", expressions=[exp.Literal.string(refusal)])
    return exp.If(this=too_long, true=raise_error, false=node)
