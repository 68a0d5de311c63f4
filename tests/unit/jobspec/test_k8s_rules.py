"""Kubernetes name syntax rules (k8s.io/apimachinery/pkg/util/validation)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_mpi.jobspec import rules


@pytest.mark.parametrize(
    "rule, value, ok",
    [
        (rules.dns1035_label, "job-1", True),
        (rules.dns1035_label, "1job", False),
        (rules.dns1035_label, "job-", False),
        (rules.dns1035_label, "Job", False),
        (rules.dns1035_label, "a" * 63, True),
        (rules.dns1035_label, "a" * 64, False),
        (rules.dns1123_label, "1job", True),
        (rules.dns1123_label, "a.b", False),
        (rules.dns1123_subdomain, "a.b-c.d", True),
        (rules.dns1123_subdomain, "a..b", False),
        (rules.dns1123_subdomain, "a" * 254, False),
        (rules.qualified_name, "app", True),
        (rules.qualified_name, "example.com/app_name.v-1", True),
        (rules.qualified_name, "/app", False),
        (rules.qualified_name, "example.com/", False),
        (rules.qualified_name, "Example.com/app", False),
        (rules.qualified_name, "a/b/c", False),
        (rules.qualified_name, "_app", False),
        (rules.qualified_name, "x" * 63, True),
        (rules.qualified_name, "x" * 64, False),
        (rules.qualified_name, ("p" * 60 + ".") * 5 + "p/x", False),  # prefix > 253
        (rules.label_value, "", True),
        (rules.label_value, "A-b_c.9", True),
        (rules.label_value, "a b", False),
        (rules.label_value, "a-", False),
        (rules.label_value, 1, False),
        (rules.annotation_key, "Example.com/Key", True),
        (rules.annotation_key, "bad key", False),
        (rules.env_var_name, "my.env-name", True),
        (rules.env_var_name, "_X1", True),
        (rules.env_var_name, "1X", False),
        (rules.env_var_name, "A=B", False),
        (rules.env_var_name, "..X", False),
        (rules.env_var_name, ".", False),
        (rules.env_var_name, "", False),
        (rules.config_map_key, "key.name_1-x", True),
        (rules.config_map_key, "a/b", False),
        (rules.config_map_key, "..a", False),
    ],
)
def test_rule(rule, value, ok):
    problem = rule(value)
    assert (problem is None) is ok, problem


# Each rule with values it accepts (a sample of the API server's grammar): alphanumeric ends, a middle of more.
LOWER, ALNUM = "abcz019", "aZ09bY"


def ended(first: str, middle: str, last: str, size: int) -> st.SearchStrategy[str]:
    """``first``-char, then up to ``size`` ``middle`` chars and a ``last`` char (or the first char alone)."""
    return st.builds(
        lambda a, m, b: a + m + b,
        st.sampled_from(first),
        st.text(middle, max_size=size),
        st.sampled_from(last),
    ) | st.sampled_from(first)


LABEL = ended(LOWER, LOWER + "-", LOWER, 61)
NAME = ended(ALNUM, ALNUM + "-_.", ALNUM, 61)
GRAMMARS = [
    (rules.dns1123_label, LABEL),
    (
        rules.dns1123_subdomain,
        st.lists(ended(LOWER, LOWER + "-", LOWER, 20), min_size=1, max_size=4).map(".".join),
    ),
    (rules.dns1035_label, ended("abz", LOWER + "-", LOWER, 61)),
    (
        rules.qualified_name,
        st.builds(lambda p, n: p + n, st.sampled_from(["", "example.com/", "a-1.b/"]), NAME),
    ),
    (rules.label_value, NAME | st.just("")),
    (rules.annotation_key, ended(ALNUM, ALNUM + "-_.", ALNUM, 30)),
    (rules.env_var_name, ended("_aZ", ALNUM + "-_.", ALNUM + "-_.", 30)),
    (rules.config_map_key, ended(ALNUM + "_", ALNUM + "-_.", ALNUM + "-_.", 30)),
]
NAMES = [
    "dns1123_label",
    "dns1123_subdomain",
    "dns1035_label",
    "qualified_name",
    "label_value",
    "annotation_key",
    "env_var_name",
    "config_map_key",
]


@pytest.mark.parametrize("rule, grammar", GRAMMARS, ids=NAMES)
@settings(max_examples=30)  # 8 rules
@given(data=st.data())
def test_every_rule_matches_the_whole_value_a_trailing_newline_is_refused(rule, grammar, data):
    """An upstream XCom rendered from check_output ends in "\\n": with re.match and "$" it passed every rule and reached
    the API server (whose Go patterns refuse it) instead of being refused before any API call."""
    value = data.draw(grammar)
    assert rule(value) is None
    tail = data.draw(st.sampled_from(["\n", "\r\n", "\n\n", " "]))
    assert rule(value + tail) is not None


@pytest.mark.parametrize("rule", [g[0] for g in GRAMMARS], ids=NAMES)
def test_a_valid_value_with_a_newline_is_refused(rule):
    assert rule("team-a\n") is not None and rule("team-a") is None


def test_the_deployment_id_pattern_matches_the_whole_value():
    from airflow_mpi.deployment_identity import _VALID

    assert _VALID.match("a1b2") and not _VALID.match("a1b2\n")
