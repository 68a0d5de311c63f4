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


# Each rule with the values it accepts (a sample of the API server's grammar, within the length limit).
GRAMMARS = [
    (rules.dns1123_label, r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"),
    (rules.dns1123_subdomain, r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?(\.[a-z0-9]{1,20}){0,3}"),
    (rules.dns1035_label, r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"),
    (rules.qualified_name, r"([a-z0-9]{1,20}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"),
    (rules.label_value, r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"),
    (rules.annotation_key, r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,30}[A-Za-z0-9])?"),
    (rules.env_var_name, r"[_a-zA-Z][-._a-zA-Z0-9]{0,30}"),
    (rules.config_map_key, r"[_a-zA-Z0-9][-._a-zA-Z0-9]{0,30}"),
]
NAMES = ["dns1123_label", "dns1123_subdomain", "dns1035_label", "qualified_name", "label_value", "annotation_key",
         "env_var_name", "config_map_key"]


@pytest.mark.parametrize("rule, grammar", GRAMMARS, ids=NAMES)
@settings(max_examples=20)  # 8 rules
@given(data=st.data())
def test_every_rule_matches_the_whole_value_a_trailing_newline_is_refused(rule, grammar, data):
    """An upstream XCom rendered from check_output ends in "\\n": with re.match and "$" it passed every rule and reached
    the API server (whose Go patterns refuse it) instead of being refused before any API call."""
    value = data.draw(st.from_regex(grammar, fullmatch=True))
    assert rule(value) is None
    tail = data.draw(st.sampled_from(["\n", "\r\n", "\n\n", " "]))
    assert rule(value + tail) is not None


@pytest.mark.parametrize("rule", [g[0] for g in GRAMMARS], ids=NAMES)
def test_a_valid_value_with_a_newline_is_refused(rule):
    assert rule("team-a\n") is not None and rule("team-a") is None


def test_the_deployment_id_pattern_matches_the_whole_value():
    from airflow_mpi.deployment_identity import _VALID

    assert _VALID.match("a1b2") and not _VALID.match("a1b2\n")
