"""The metric names a PromQL expression or a Grafana variable query selects: how the dashboards' and
alerts' tests check that every name they use is one Herald exports."""

from __future__ import annotations

import re

# ---- PromQL: the metric names an expression selects ----------------------------------------------

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<variable>\$\{[^}]*\}|\$\w+|\[\[[\w:.]+\]\])
  | (?P<number>0[xX][0-9a-fA-F]+
      |(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?:(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)?)
  | (?P<name>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<punct>=~|!~|!=|==|<=|>=|.)
""", re.VERBOSE | re.DOTALL)

# Followed by a parenthesised list of label names (group_left/right may have none).
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}
# Aggregations may be followed by `by (...)` before their parenthesis: not always a call at once.
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
                "topk", "quantile", "limitk", "limit_ratio"}


def _tokens(expr: str) -> list[tuple[str, str]]:
    found = []
    for match in _TOKEN.finditer(expr):
        kind = match.lastgroup
        assert kind is not None
        if kind not in ("space", "comment"):
            found.append((kind, match.group()))
    return found


def _closing(tokens: list[tuple[str, str]], start: int, opening: str, closing: str) -> int:
    """The index of the token closing the bracket opened at `start`."""
    depth = 0
    for index in range(start, len(tokens)):
        if tokens[index] == ("punct", opening):
            depth += 1
        elif tokens[index] == ("punct", closing):
            depth -= 1
            if depth == 0:
                return index
    raise ValueError(f"unbalanced {opening!r} in {' '.join(text for _, text in tokens)!r}")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: its bare identifiers, less functions (a name
    followed by a parenthesis), aggregations, keywords, the label names of `by (...)` and the like,
    label matchers inside `{...}` (but a `__name__="x"` matcher's x), ranges and subqueries `[...]`,
    strings, numbers, durations and Grafana variables."""
    tokens = _tokens(expr)
    names: set[str] = set()
    index = 0
    while index < len(tokens):
        kind, text = tokens[index]
        following = tokens[index + 1] if index + 1 < len(tokens) else ("", "")
        if (kind, text) == ("punct", "{"):
            end = _closing(tokens, index, "{", "}")
            matchers = tokens[index + 1:end]
            for at, (matcher_kind, matcher) in enumerate(matchers[:-2]):
                if (matcher_kind, matcher) == ("name", "__name__") and matchers[at + 1] == ("punct", "=") \
                        and matchers[at + 2][0] == "string":
                    names.add(matchers[at + 2][1][1:-1])
            index = end + 1
            continue
        if (kind, text) == ("punct", "["):  # a range or subquery: durations, variables and ':'
            index = _closing(tokens, index, "[", "]") + 1
            continue
        if kind == "name":
            word = text.lower()
            if word in LABEL_LIST_KEYWORDS:
                index = _closing(tokens, index + 1, "(", ")") + 1 if following == ("punct", "(") else index + 1
                continue
            if word not in KEYWORDS and word not in AGGREGATIONS and following != ("punct", "("):
                names.add(text)
        index += 1
    return names


def variable_metric_names(query: str) -> set[str]:
    """The metric names of a Grafana Prometheus variable query: label_values(<expr>, <label>),
    query_result(<expr>); label_values(<label>), label_names() and metrics(<regex>) name none."""
    query = query.strip()
    call = re.fullmatch(r"(\w+)\s*\((.*)\)", query, re.DOTALL)
    if call is None:
        return metric_names(query)
    function, arguments = call.groups()
    if function == "label_values":
        expr, comma, _ = arguments.rpartition(",")
        return metric_names(expr) if comma else set()
    if function == "query_result":
        return metric_names(arguments)
    if function in ("label_names", "metrics"):
        return set()
    return metric_names(query)
